#include "nn/layers/embedding.h"

#include "nn/init.h"

namespace volt::nn {

Embedding::Embedding(int64_t num, int64_t dim) : num_embeddings(num), embedding_dim(dim) {
  VOLT_CHECK(num > 0 && dim > 0, "Embedding: num_embeddings and embedding_dim must be positive, got ", num, ", ", dim);
  weight = register_parameter("weight", empty({num, dim}));
  init::normal_(weight, 0.0, 1.0);
}

Tensor Embedding::forward(const Tensor& indices) { return embedding(weight, indices); }

std::string Embedding::extra_repr() const {
  return std::to_string(num_embeddings) + ", " + std::to_string(embedding_dim);
}

}  // namespace volt::nn
