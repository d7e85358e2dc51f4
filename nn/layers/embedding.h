#pragma once
#include <optional>

#include <volt/nn/module.h>

namespace volt::nn {

/// Lookup table: indices (...) of dtype i64 or i32 -> (..., embedding_dim) (embedding in kernels/ops.h); an index
/// outside [0, num_embeddings) throws volt::Error naming it and the table size. weight ~ N(0, 1) as in PyTorch.
/// padding_idx (PyTorch's meaning; negative values count from the end, so -1 is the last row): that row starts as
/// zeros and its gradient is always zero, so it stays as it is through training.
class Embedding : public UnaryModule {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, std::optional<int64_t> padding_idx = std::nullopt);
  Tensor forward(const Tensor& indices) override;
  /// weight ~ N(0, 1), the padding row zeroed.
  void reset_parameters();
  std::string type_name() const override { return "Embedding"; }
  std::string extra_repr() const override;

  int64_t num_embeddings, embedding_dim;
  std::optional<int64_t> padding_idx;  ///< normalised to [0, num_embeddings)
  Tensor weight;                       ///< (num_embeddings, embedding_dim)
};

}  // namespace volt::nn
