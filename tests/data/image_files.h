#pragma once
// Writes small PNG and JPEG files for the image tests with the same libraries Volt decodes with (libpng's
// simplified API, libjpeg). Pixels are interleaved (H, W, C).
#include <png.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <jpeglib.h>

namespace volt::data::testing {

// channels: 1 gray, 2 gray+alpha, 3 RGB, 4 RGBA.
inline void write_png(const std::string& path, int width, int height, int channels, const std::vector<uint8_t>& px) {
  ASSERT_EQ(px.size(), size_t(width) * height * channels);
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  png_image img{};
  img.version = PNG_IMAGE_VERSION;
  img.width = width;
  img.height = height;
  const png_uint_32 formats[] = {PNG_FORMAT_GRAY, PNG_FORMAT_GA, PNG_FORMAT_RGB, PNG_FORMAT_RGBA};
  img.format = formats[channels - 1];
  ASSERT_TRUE(png_image_write_to_file(&img, path.c_str(), 0, px.data(), 0, nullptr)) << img.message;
}

// channels: 1 gray, 3 RGB.
inline std::string jpeg_bytes(int width, int height, int channels, const std::vector<uint8_t>& px, int quality) {
  jpeg_compress_struct c;
  jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &buf, &size);
  c.image_width = width;
  c.image_height = height;
  c.input_components = channels;
  c.in_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, quality, TRUE);
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(px.data()) + size_t(c.next_scanline) * width * channels;
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  std::string out(reinterpret_cast<char*>(buf), size);
  std::free(buf);
  return out;
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
  std::fclose(f);
}

inline void write_jpeg(const std::string& path, int width, int height, int channels, const std::vector<uint8_t>& px,
                       int quality = 95) {
  write_bytes(path, jpeg_bytes(width, height, channels, px, quality));
}

inline std::string read_bytes(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  std::string s;
  if (!f) return s;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) s.append(buf, n);
  std::fclose(f);
  return s;
}

}  // namespace volt::data::testing
