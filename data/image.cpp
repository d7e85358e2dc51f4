#include <volt/data/image.h>

#include <png.h>

#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

#include <jpeglib.h>

#include <volt/data/transforms.h>

namespace volt::data {

namespace {

// Decoded pixels, interleaved (H, W, C) with C in {1 (gray), 2 (gray+alpha), 3 (RGB), 4 (RGBA)}.
struct Pixels {
  int64_t height = 0, width = 0, channels = 0;
  std::vector<uint8_t> data;
};

void check_size(int64_t h, int64_t w, int64_t max_pixels, const std::string& name) {
  VOLT_CHECK(h >= 1 && w >= 1 && h <= max_pixels / w, "read_image: ", name, " is ", w, "x", h,
             " pixels; at most ", max_pixels, " pixels are accepted");
}

Pixels decode_png(const uint8_t* data, size_t size, const std::string& name, int64_t max_pixels) {
  png_image img;
  std::memset(&img, 0, sizeof(img));
  img.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&img, data, size))
    VOLT_FAIL("read_image: ", name, " is not a readable PNG file: ", img.message);
  struct Free {
    png_image* p;
    ~Free() { png_image_free(p); }
  } free_img{&img};
  check_size(img.height, img.width, max_pixels, name);
  // Keep the alpha channel so libpng never composites; it is dropped afterwards.
  const bool color = (img.format & PNG_FORMAT_FLAG_COLOR) != 0;
  img.format = color ? PNG_FORMAT_RGBA : PNG_FORMAT_GA;
  Pixels px{img.height, img.width, color ? 4 : 2, {}};
  px.data.resize(PNG_IMAGE_SIZE(img));
  if (!png_image_finish_read(&img, nullptr, px.data.data(), 0, nullptr))
    VOLT_FAIL("read_image: ", name, " is a corrupt PNG file: ", img.message);
  return px;
}

// libjpeg reports errors (and, here, warnings: corrupt data) by longjmp back into decode_jpeg_raw.
struct JpegError {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

[[noreturn]] void jpeg_fail(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegError*>(cinfo->err);
  err->pub.format_message(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

void jpeg_emit(j_common_ptr cinfo, int level) {
  if (level < 0) jpeg_fail(cinfo);  // a warning: the data is corrupt
}

// Progressive files can hold thousands of scans, each a full pass over the image: bound the work.
void jpeg_progress(j_common_ptr cinfo) {
  auto* d = reinterpret_cast<j_decompress_ptr>(cinfo);
  if (d->input_scan_number > 256) {
    auto* err = reinterpret_cast<JpegError*>(cinfo->err);
    std::snprintf(err->message, sizeof(err->message), "more than 256 progressive scans");
    std::longjmp(err->jump, 1);
  }
}

// Plain C data only between setjmp and longjmp (no destructors are skipped). On success *out is malloc'ed
// (H, W, C) pixels; on failure `message` says why.
bool decode_jpeg_raw(const uint8_t* data, size_t size, int64_t max_pixels, uint8_t** out, int* h, int* w, int* c,
                     char* message, size_t message_size) {
  jpeg_decompress_struct cinfo;
  JpegError err;
  jpeg_progress_mgr progress;
  uint8_t* volatile pixels = nullptr;
  cinfo.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = jpeg_fail;
  err.pub.emit_message = jpeg_emit;
  err.message[0] = '\0';
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    std::free(pixels);
    std::snprintf(message, message_size, "%s", err.message);
    return false;
  }
  jpeg_create_decompress(&cinfo);
  progress.progress_monitor = jpeg_progress;
  cinfo.progress = &progress;
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&cinfo, TRUE);
  if (cinfo.image_width < 1 || cinfo.image_height < 1 ||
      static_cast<int64_t>(cinfo.image_height) > max_pixels / static_cast<int64_t>(cinfo.image_width)) {
    std::snprintf(message, message_size, "%ux%u pixels; at most %lld pixels are accepted", cinfo.image_width,
                  cinfo.image_height, static_cast<long long>(max_pixels));
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  cinfo.out_color_space = cinfo.num_components == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_start_decompress(&cinfo);
  const size_t row = static_cast<size_t>(cinfo.output_width) * cinfo.output_components;
  pixels = static_cast<uint8_t*>(std::malloc(row * cinfo.output_height));
  if (!pixels) {
    std::snprintf(message, message_size, "out of memory");
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW r = pixels + static_cast<size_t>(cinfo.output_scanline) * row;
    jpeg_read_scanlines(&cinfo, &r, 1);
  }
  jpeg_finish_decompress(&cinfo);
  *out = pixels;
  *h = static_cast<int>(cinfo.output_height);
  *w = static_cast<int>(cinfo.output_width);
  *c = cinfo.output_components;
  jpeg_destroy_decompress(&cinfo);
  return true;
}

Pixels decode_jpeg(const uint8_t* data, size_t size, const std::string& name, int64_t max_pixels) {
  uint8_t* raw = nullptr;
  int h = 0, w = 0, c = 0;
  char message[JMSG_LENGTH_MAX + 64];
  if (!decode_jpeg_raw(data, size, max_pixels, &raw, &h, &w, &c, message, sizeof(message)))
    VOLT_FAIL("read_image: ", name, " is not a readable JPEG file: ", message);
  Pixels px{h, w, c, std::vector<uint8_t>(raw, raw + static_cast<size_t>(h) * w * c)};
  std::free(raw);
  return px;
}

}  // namespace

Tensor decode_image(const uint8_t* data, size_t size, int channels, const std::string& name, int64_t max_pixels) {
  VOLT_CHECK(channels == 1 || channels == 3, "read_image: channels must be 1 or 3, got ", channels);
  static const uint8_t kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  Pixels px;
  if (size >= 8 && std::memcmp(data, kPng, 8) == 0) px = decode_png(data, size, name, max_pixels);
  else if (size >= 3 && data[0] == 0xff && data[1] == 0xd8 && data[2] == 0xff) px = decode_jpeg(data, size, name, max_pixels);
  else VOLT_FAIL("read_image: ", name, " is neither a PNG nor a JPEG file (unknown signature)");
  const int64_t hw = px.height * px.width, in_c = px.channels;
  const bool in_color = in_c >= 3;
  Tensor out = empty({channels, px.height, px.width}, DType::u8);
  uint8_t* o = out.data<uint8_t>();
  const uint8_t* p = px.data.data();
  for (int64_t i = 0; i < hw; ++i, p += in_c) {
    if (channels == 3) {
      for (int k = 0; k < 3; ++k) o[k * hw + i] = in_color ? p[k] : p[0];
    } else {
      o[i] = in_color ? static_cast<uint8_t>((19595u * p[0] + 38470u * p[1] + 7471u * p[2] + 0x8000u) >> 16) : p[0];
    }
  }
  return out;
}

Tensor read_image(const std::string& path, int channels) {
  std::ifstream in(path, std::ios::binary);
  VOLT_CHECK(in.good(), "read_image: cannot open ", path);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  VOLT_CHECK(!in.bad(), "read_image: cannot read ", path);
  return to_float(decode_image(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), channels, path));
}

}  // namespace volt::data
