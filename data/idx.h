#pragma once
/// @file
/// The IDX file format of MNIST and Fashion-MNIST: a 4-byte big-endian magic number 0x0000TTNN (TT = element
/// type, 0x08 = unsigned byte; NN = number of dimensions), NN big-endian uint32 sizes, then the elements in
/// row-major order. Files may be gzip-compressed; compression is detected from the gzip magic bytes (1f 8b),
/// not from the file name.
#include <cstdint>
#include <string>

#include <volt/kernels/tensor.h>

namespace volt::data {

/// Reads an unsigned-byte IDX file into a u8 tensor of the header's shape: images (N, 28, 28), labels (N).
/// `expected_ndim` >= 0 also requires that many dimensions (3 for images, magic 0x00000803; 1 for labels,
/// 0x00000801). The (decompressed) file size must match the header exactly. Throws volt::Error naming the path
/// for a missing or unreadable file, a corrupt gzip stream, a wrong magic number or type byte, and a size
/// mismatch (with the expected and actual byte counts; "truncated" or "trailing bytes").
Tensor read_idx(const std::string& path, int expected_ndim = -1);

/// Writes a u8 tensor (any shape with 1..255 dims) as an IDX file, gzip-compressed when `gzip`. For tests and
/// for converting data; the file is replaced if it exists.
void write_idx(const std::string& path, const Tensor& data, bool gzip = false);

}  // namespace volt::data
