#pragma once
/// @file
/// NumPy's .npz archives (np.savez, np.savez_compressed): a zip file whose members are .npy files
/// (data/npy.h), one per array. The zip structure is read here (end-of-central-directory record, central
/// directory, local headers); deflate members are inflated with zlib.
#include <map>
#include <string>
#include <vector>

#include <volt/kernels/tensor.h>

namespace volt::data {

/// Every member of an .npz archive, keyed by its name without the ".npy" suffix ("x.npy" -> "x"). Members
/// may be stored (np.savez) or deflate-compressed (np.savez_compressed); their CRC-32 is checked. Zip64
/// archives (over 4 GiB or 65535 members), encryption, multi-disk archives, other compression methods and
/// members that are not .npy files are refused with an error naming the archive and the member.
std::map<std::string, Tensor> read_npz(const std::string& path);
/// One member, `key` with or without ".npy"; the others are not decompressed. An unknown key is an error
/// that lists the archive's keys.
Tensor read_npz_array(const std::string& path, const std::string& key);
/// The member names of an archive as read_npz keys them, in archive order.
std::vector<std::string> npz_keys(const std::string& path);

/// Writes `arrays` as an .npz archive that np.load reads: one `"<key>.npy"` member per entry (npy_bytes with
/// default options), stored uncompressed, or deflate-compressed when `compress` (like np.savez_compressed).
/// Keys must be non-empty and the archive must not need zip64 (each member and the whole file under 4 GiB).
void write_npz(const std::string& path, const std::map<std::string, Tensor>& arrays, bool compress = false);

}  // namespace volt::data
