#pragma once
/// @file
/// NumPy's .npy array files, read into and written from CPU tensors (no Python involved). .npz archives of
/// .npy members are in data/npz.h.
///
/// A .npy file is the magic "\x93NUMPY", a major and minor version byte (1.0, 2.0 or 3.0), the header length
/// (uint16 little-endian for 1.0, uint32 for 2.0/3.0), then a Python dict literal such as
/// {'descr': '<f4', 'fortran_order': False, 'shape': (60000, 784), } padded with spaces to a newline, then the
/// raw elements.
///
/// dtypes read (either byte order, '<' '>' '|' or '='; '=' is taken as little-endian like this host):
/// @code{.unparsed}
///   f2 -> f16   f4 -> f32   f8 -> f64   i8 -> i64   i4 -> i32   i1 -> i8   u1 -> u8   b1 -> boolean (nonzero -> 1)
///   i2, u2 -> i32 and u4 -> i64 (widened: Volt has no 16-bit or 32-bit unsigned dtype; the values are kept
///   exactly).
/// @endcode
/// Refused with an error naming the dtype: u8 (uint64: no Volt dtype holds every value; save
/// arr.astype(np.int64)), complex, strings, objects (pickles), datetimes and structured dtypes.
/// Fortran-order (column-major) arrays are read and returned in Volt's row-major layout with the same shape
/// and values. 0-d arrays become 0-d tensors.
///
/// Every error names the file (for an .npz member "archive.npz[x.npy]") and what was wrong: a bad magic
/// string, an unknown version, a header that is truncated or not a valid dict (the offending text is quoted),
/// a missing or unknown key, a negative or overflowing shape, and a data size that does not match the header
/// (with both byte counts; "truncated" or "trailing bytes").
#include <cstdint>
#include <string>
#include <string_view>

#include <volt/kernels/tensor.h>

namespace volt::data {

/// Reads a .npy file.
Tensor read_npy(const std::string& path);
/// Decodes .npy bytes held in memory; `name` stands for the source in error messages.
Tensor parse_npy(std::string_view bytes, const std::string& name);

struct NpyWriteOptions {
  int version = 0;            ///< 1, 2 or 3; 0 picks 1.0, or 2.0 when the header does not fit 1.0's 64 KiB
  bool big_endian = false;    ///< '>' byte order for multi-byte dtypes (NumPy reads both)
  bool fortran_order = false; ///< write the elements column-major with 'fortran_order': True
};

/// The .npy encoding of `t` (any shape, any device; copied to the host). dtypes written: f16 '<f2', f32 '<f4',
/// f64 '<f8', i32 '<i4', i64 '<i8', u8 '|u1', boolean '|b1'. bf16 has no NumPy dtype and is refused (convert
/// with t.to(DType::f32) first). The header is padded so the data starts on a 64-byte boundary, as NumPy does.
std::string npy_bytes(const Tensor& t, const NpyWriteOptions& options = {});
/// Writes npy_bytes(t, options) to `path`, replacing the file if it exists.
void write_npy(const std::string& path, const Tensor& t, const NpyWriteOptions& options = {});

}  // namespace volt::data
