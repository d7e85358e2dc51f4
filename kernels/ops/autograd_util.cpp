// sum_to, which every broadcasting backward formula calls.
#include <volt/kernels/ops.h>

namespace volt {

Tensor sum_to(const Tensor& grad, const Shape& shape) {
  if (grad.shape() == shape) return grad;
  const int64_t lead = grad.dim() - static_cast<int64_t>(shape.size());
  VOLT_ASSERT(lead >= 0, "sum_to: target has more dims than the gradient");
  std::vector<int64_t> dims;
  for (int64_t i = 0; i < grad.dim(); ++i) {
    if (i < lead) dims.push_back(i);
    else if (shape[i - lead] == 1 && grad.shape()[i] != 1) dims.push_back(i);
  }
  Tensor r = dims.empty() ? grad : sum(grad, dims, /*keepdim=*/true);
  return r.reshape(shape);
}

}  // namespace volt
