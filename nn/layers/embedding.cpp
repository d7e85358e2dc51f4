#include <volt/nn/layers/embedding.h>

#include <volt/nn/init.h>

namespace volt::nn {

Embedding::Embedding(int64_t num, int64_t dim, std::optional<int64_t> pad) : num_embeddings(num), embedding_dim(dim) {
  VOLT_CHECK(num > 0 && dim > 0, "Embedding: num_embeddings and embedding_dim must be positive, got ", num, ", ", dim);
  if (pad) {
    VOLT_CHECK(*pad >= -num && *pad < num, "Embedding: padding_idx ", *pad, " is out of range for num_embeddings ",
               num, " (expected ", -num, " <= padding_idx < ", num, ")");
    padding_idx = *pad < 0 ? *pad + num : *pad;
  }
  weight = register_parameter("weight", empty({num, dim}));
  reset_parameters();
}

void Embedding::reset_parameters() {
  init::normal_(weight, 0.0, 1.0);
  if (padding_idx) {
    NoGradGuard ng;
    weight.narrow(0, *padding_idx, 1).zero_();
  }
}

Tensor Embedding::forward(const Tensor& indices) { return embedding(weight, indices, padding_idx); }

std::string Embedding::extra_repr() const {
  std::string s = std::to_string(num_embeddings) + ", " + std::to_string(embedding_dim);
  if (padding_idx) s += ", padding_idx=" + std::to_string(*padding_idx);
  return s;
}

}  // namespace volt::nn
