#pragma once
/// @file
/// PNG and JPEG decoding (libpng's simplified API, libjpeg-turbo) into tensors. The format is recognised by the
/// file signature, not the extension.
///
/// Pixels come out as 8-bit sRGB, as the decoders return them: palette, low-bit-depth and 16-bit PNGs are
/// expanded or reduced to 8 bits per channel, an alpha channel is dropped (not composited, like PIL's
/// convert("RGB")), gray becomes RGB by repetition, and RGB becomes gray with ITU-R 601-2 luma in PIL's integer
/// form, L = (19595 R + 38470 G + 7471 B + 32768) >> 16. Truncated or corrupt data (any libjpeg warning included)
/// is an error, never a partly decoded image. Errors are volt::Error and name `name` (a path, for files).
#include <cstddef>
#include <cstdint>
#include <string>

#include <volt/kernels/tensor.h>

namespace volt::data {

/// Images larger than this many pixels are rejected before their pixels are decoded (a 16384 x 16384 image).
constexpr int64_t kMaxImagePixels = int64_t(1) << 28;

/// PNG or JPEG bytes -> u8 (channels, H, W); channels is 1 (gray) or 3 (RGB).
Tensor decode_image(const uint8_t* data, size_t size, int channels, const std::string& name,
                    int64_t max_pixels = kMaxImagePixels);
/// The image file at `path` -> f32 (channels, H, W) with values x / 255 in [0, 1].
Tensor read_image(const std::string& path, int channels);

}  // namespace volt::data
