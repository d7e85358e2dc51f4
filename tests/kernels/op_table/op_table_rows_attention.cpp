// Op table rows (see op_table.h): scaled_dot_product_attention without a mask, with bool, additive (differentiable)
// and causal masks, broadcast batch dims, the weights output, long rows that reach the CUDA kernels' strided
// loops over keys, and calls that cuDNN's fused SDPA takes on a GPU in f16/bf16 (head dims multiples of 8, no mask:
// kernels/sdpa_path.h; the other dtypes and devices run Volt's kernel). causal_self_attention_packed
// (kernels/attention_packed.h), whose CPU reference is the composition it is defined by: GPT-2's shapes with
// 8-wide heads (cuDNN's path on a GPU in f16/bf16) and 4-wide heads (the composition everywhere).
#include "kernels/op_table/op_table.h"

#include <volt/kernels/attention_packed.h>

namespace volt::optable {
namespace {

// A (L, S) keep-mask with a fully masked query (row 1) and every other row keeping at least one key.
Tensor keep_with_empty_row() {
  return from_vector<uint8_t>({1, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 1, 0, 1, 1, 1, 1}, {4, 5}).to(DType::boolean);
}

const bool kRows = add_rows([](std::vector<OpRow>& r) {
  r.push_back(row("sdpa", FWD(scaled_dot_product_attention(x[0], x[1], x[2])),
                  {U({2, 3, 4, 8}), U({2, 3, 5, 8}), U({2, 3, 5, 6})})
                  .tol(3));
  r.push_back(row("sdpa_weights", FWD(scaled_dot_product_attention_with_weights(x[0], x[1], x[2]).second),
                  {U({2, 4, 6}), U({2, 5, 6}), U({2, 5, 3}).no_grad()})
                  .tol(3));
  r.push_back(row("sdpa_bool_mask_empty_row", FWD(scaled_dot_product_attention(x[0], x[1], x[2], x[3])),
                  {U({2, 4, 6}), U({2, 5, 6}), U({2, 5, 3}), Custom(keep_with_empty_row).no_grad()})
                  .tol(3));
  r.push_back(row("sdpa_key_padding_mask", FWD(scaled_dot_product_attention(x[0], x[1], x[2], x[3])),
                  {U({2, 2, 3, 4}), U({2, 2, 5, 4}), U({2, 2, 5, 3}), Mask({2, 1, 1, 5})})
                  .tol(3));
  r.push_back(row("sdpa_additive_mask", FWD(scaled_dot_product_attention(x[0], x[1], x[2], x[3])),
                  {U({2, 4, 6}), U({2, 5, 6}), U({2, 5, 3}), U({4, 5}, -2, 2)})
                  .tol(3));
  r.push_back(row("sdpa_causal_scale", FWD(scaled_dot_product_attention(x[0], x[1], x[2], Tensor(), 0.0, true, 0.8)),
                  {U({2, 5, 4}), U({2, 5, 4}), U({2, 5, 3})})
                  .tol(3));
  r.push_back(row("sdpa_causal_mask_broadcast", FWD(scaled_dot_product_attention(x[0], x[1], x[2], x[3], 0.0, true)),
                  {U({2, 1, 4, 4}), U({3, 5, 4}), U({5, 2}), Mask({3, 1, 5})})
                  .tol(3));
  r.push_back(row("sdpa_transposed_q", FWD(scaled_dot_product_attention(x[0], x[1], x[2])),
                  {U({6, 4}).view(transposed), U({5, 6}), U({5, 3})})
                  .tol(3));
  r.push_back(row("sdpa_long_rows", FWD(scaled_dot_product_attention(x[0], x[1], x[2], x[3], 0.0, true)),
                  {U({2, 37, 16}), U({2, 300, 16}), U({2, 300, 4}), Mask({37, 300})})
                  .tol(6)
                  .no_gradcheck());
  r.push_back(row("sdpa_flash_causal", FWD(scaled_dot_product_attention(x[0], x[1], x[2], Tensor(), 0.0, true)),
                  {U({2, 2, 16, 8}), U({2, 2, 16, 8}), U({2, 2, 16, 8})})
                  .tol(3));
  r.push_back(row("sdpa_flash_cross", FWD(scaled_dot_product_attention(x[0], x[1], x[2])),
                  {U({3, 5, 16}), U({3, 7, 16}), U({3, 7, 8})})
                  .tol(3));
  r.push_back(row("attention_packed", FWD(causal_self_attention_packed(x[0], 3)), {U({2, 5, 36})}).tol(3));
  r.push_back(row("attention_packed_flash", FWD(causal_self_attention_packed(x[0], 2)), {U({2, 16, 48})}).tol(3));
});

}  // namespace
}  // namespace volt::optable
