// Tensor's math shortcuts: thin forwards to the free functions.
#include <volt/kernels/ops.h>

namespace volt {

Tensor Tensor::neg() const { return volt::neg(*this); }
Tensor Tensor::exp() const { return volt::exp(*this); }
Tensor Tensor::log() const { return volt::log(*this); }
Tensor Tensor::sqrt() const { return volt::sqrt(*this); }
Tensor Tensor::abs() const { return volt::abs(*this); }
Tensor Tensor::relu() const { return volt::relu(*this); }
Tensor Tensor::sigmoid() const { return volt::sigmoid(*this); }
Tensor Tensor::tanh() const { return volt::tanh(*this); }
Tensor Tensor::gelu() const { return volt::gelu(*this); }
Tensor Tensor::silu() const { return volt::silu(*this); }
Tensor Tensor::pow(double e) const { return volt::pow(*this, e); }
Tensor Tensor::clamp(std::optional<double> lo, std::optional<double> hi) const { return volt::clamp(*this, lo, hi); }
Tensor Tensor::sum() const { return volt::sum(*this); }
Tensor Tensor::sum(const std::vector<int64_t>& dims, bool keepdim) const { return volt::sum(*this, dims, keepdim); }
Tensor Tensor::mean() const { return volt::mean(*this); }
Tensor Tensor::mean(const std::vector<int64_t>& dims, bool keepdim) const { return volt::mean(*this, dims, keepdim); }
Tensor Tensor::max() const { return volt::max(*this); }
Tensor Tensor::min() const { return volt::min(*this); }
Tensor Tensor::argmax(int64_t dim, bool keepdim) const { return volt::argmax(*this, dim, keepdim); }
Tensor Tensor::matmul(const Tensor& other) const { return volt::matmul(*this, other); }
Tensor Tensor::softmax(int64_t dim) const { return volt::softmax(*this, dim); }
Tensor Tensor::log_softmax(int64_t dim) const { return volt::log_softmax(*this, dim); }

}  // namespace volt
