#pragma once
// How a list of tensors is cut into chunks for multi-tensor kernels (the optimizers' one-launch updates): host
// code only, shared by the CUDA launcher and the CPU tests that pin its behaviour.
//
// A launch takes at most `max_tensors` tensors and `max_chunks` chunks (its argument block has fixed-size
// arrays); each chunk is up to `chunk` consecutive elements of one tensor, and one GPU block processes one chunk.
// Tensors are taken in list order; a tensor whose chunks do not fit in the current launch continues in the next
// one (listed in both). Empty tensors get no chunk and appear in no launch.
#include <cstdint>
#include <vector>

#include <volt/runtime/error.h>

namespace volt::multi_tensor {

struct Chunk {
  int tensor = 0;      ///< index into Launch::tensors
  int64_t begin = 0;   ///< first element of the chunk within its tensor
};

struct Launch {
  std::vector<int> tensors;  ///< indices into the caller's list
  std::vector<Chunk> chunks;
};

inline std::vector<Launch> plan(const std::vector<int64_t>& numels, int64_t chunk, int max_tensors, int max_chunks) {
  VOLT_CHECK(chunk > 0 && max_tensors > 0 && max_chunks > 0, "multi_tensor::plan: chunk=", chunk,
             ", max_tensors=", max_tensors, " and max_chunks=", max_chunks, " must be positive");
  std::vector<Launch> launches;
  Launch cur;
  auto flush = [&] {
    if (!cur.chunks.empty()) launches.push_back(std::move(cur));
    cur = Launch{};
  };
  for (size_t t = 0; t < numels.size(); ++t) {
    VOLT_CHECK(numels[t] >= 0, "multi_tensor::plan: tensor ", t, " has ", numels[t], " elements");
    for (int64_t begin = 0; begin < numels[t]; begin += chunk) {
      const bool listed = !cur.tensors.empty() && cur.tensors.back() == static_cast<int>(t);
      if (static_cast<int>(cur.chunks.size()) == max_chunks ||
          (!listed && static_cast<int>(cur.tensors.size()) == max_tensors))
        flush();
      if (cur.tensors.empty() || cur.tensors.back() != static_cast<int>(t)) cur.tensors.push_back(static_cast<int>(t));
      cur.chunks.push_back({static_cast<int>(cur.tensors.size()) - 1, begin});
    }
  }
  flush();
  return launches;
}

// The chunk length for a list: the smallest power of two in [min_chunk, max_chunk] whose chunks of the whole list
// fit `max_chunks` (one launch when the tensor limit allows), else max_chunk. Small lists get short chunks, so
// many blocks share the work (an MLP's 100k parameters in 65536-element chunks were 5 blocks of 256 threads, each
// thread walking 256 elements: 116 us for an update the GPU does in a few); large lists keep long ones and few
// launches.
inline int64_t chunk_for(const std::vector<int64_t>& numels, int max_chunks, int64_t min_chunk, int64_t max_chunk) {
  VOLT_CHECK(min_chunk > 0 && min_chunk <= max_chunk && max_chunks > 0, "multi_tensor::chunk_for: min_chunk=",
             min_chunk, ", max_chunk=", max_chunk, " and max_chunks=", max_chunks, " are not a valid range");
  for (int64_t c = min_chunk; c < max_chunk; c *= 2) {
    int64_t chunks = 0;
    for (int64_t n : numels) chunks += (n + c - 1) / c;
    if (chunks <= max_chunks) return c;
  }
  return max_chunk;
}

}  // namespace volt::multi_tensor
