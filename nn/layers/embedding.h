#pragma once
#include "nn/module.h"

namespace volt::nn {

// Lookup table: indices (...) of dtype i64 -> (..., embedding_dim). weight ~ N(0, 1) as in PyTorch.
class Embedding : public UnaryModule {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim);
  Tensor forward(const Tensor& indices) override;
  std::string type_name() const override { return "Embedding"; }
  std::string extra_repr() const override;

  int64_t num_embeddings, embedding_dim;
  Tensor weight;  // (num_embeddings, embedding_dim)
};

}  // namespace volt::nn
