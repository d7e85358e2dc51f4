#pragma once
/// @file
/// volt::Tensor: a reference-counted handle to (shared storage, shape, strides, offset, dtype, device) plus
/// autograd state. Copying a Tensor copies the handle, not the data (like torch.Tensor).
///
/// Where things live: metadata, raw views and the autograd engine are in runtime/; every method that computes
/// (views with autograd, copies, casts, arithmetic) is defined in kernels/ops/ and declared here so that user
/// code can write x.flatten(1).relu().sum().
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <volt/runtime/device.h>
#include <volt/runtime/dtype.h>
#include <volt/runtime/error.h>
#include <volt/runtime/storage.h>

namespace volt {

using Shape = std::vector<int64_t>;
struct Node;
struct TensorImpl;
class Tensor;

using GradHook = std::function<void(const Tensor& param)>;

class Tensor {
 public:
  Tensor() = default;  ///< an undefined tensor (no storage); defined() is false
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- metadata (kernels/tensor.cpp) -----------------------------------------------------------------
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  const Shape& strides() const;
  int64_t dim() const;
  int64_t size(int64_t d) const;    ///< negative d counts from the end
  int64_t stride(int64_t d) const;
  int64_t numel() const;
  int64_t offset() const;           ///< in elements, into the storage
  DType dtype() const;
  Device device() const;
  bool is_cuda() const { return device().is_cuda(); }
  bool is_contiguous() const;       ///< row-major dense
  size_t nbytes() const { return static_cast<size_t>(numel()) * itemsize(dtype()); }
  void* data_ptr() const;           ///< first element of this view
  template <class T> T* data() const {
    VOLT_CHECK(dtype() == dtype_of<T>::value, "Tensor::data<T>: tensor has dtype ", dtype_name(dtype()),
               " but ", dtype_name(dtype_of<T>::value), " was requested");
    return static_cast<T*>(data_ptr());
  }
  const std::shared_ptr<Storage>& storage() const;
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }
  std::string shape_str() const;    ///< "(16, 784)"

  // ---- autograd (kernels/autograd.cpp) ---------------------------------------------------------------
  bool requires_grad() const;
  /// Marks a leaf as a parameter whose gradient is accumulated into grad(). Returns *this.
  Tensor& set_requires_grad(bool on = true);
  Tensor& requires_grad_(bool on = true) { return set_requires_grad(on); }
  Tensor grad() const;              ///< undefined until a backward reaches this leaf
  void set_grad(const Tensor& g);   ///< pass an undefined tensor to clear (gradients to None)
  const std::shared_ptr<Node>& grad_fn() const;
  bool is_leaf() const;             ///< no grad_fn
  /// Backpropagates from this tensor. With no `gradient`, the tensor must hold exactly one element.
  /// The graph's saved tensors are freed afterwards unless retain_graph is true.
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false) const;
  Tensor detach() const;            ///< same storage, no history, requires_grad false
  /// Called after this leaf's gradient for the current backward pass is fully accumulated (all
  /// contributions summed), while backward continues on the rest of the graph. Returns a handle for removal.
  int register_grad_ready_hook(GradHook hook);
  void remove_grad_ready_hook(int handle);

  // ---- views (kernels/ops/view_ops.cpp); they share storage and are differentiable --------------------
  Tensor view(const Shape& shape) const;       ///< one dim may be -1; needs compatible strides
  Tensor reshape(const Shape& shape) const;    ///< view when possible, else a contiguous copy
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor permute(const Shape& dims) const;
  Tensor t() const;                             ///< transpose of a 2-D tensor
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;  ///< python-like, negative ok
  Tensor select(int64_t dim, int64_t index) const;  ///< removes `dim`
  Tensor expand(const Shape& shape) const;     ///< -1 keeps a size; size-1 dims broadcast with stride 0
  Tensor expand_as(const Tensor& other) const { return expand(other.shape()); }
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;

  // ---- copies and conversions (kernels/ops/copy_ops.cpp) ---------------------------------------------
  Tensor contiguous() const;                   ///< *this when already contiguous
  Tensor clone() const;
  Tensor to(Device device, bool non_blocking = false) const;
  Tensor to(DType dtype) const;                ///< round-to-nearest-even for f16/bf16
  Tensor to(Device device, DType dtype) const;
  Tensor cpu() const { return to(kCPU); }
  Tensor cuda(int index = 0) const;
  Tensor& copy_(const Tensor& src);            ///< broadcasting, casting, cross-device; in place
  Tensor& fill_(double value);
  Tensor& zero_() { return fill_(0.0); }
  double item() const;                         ///< one-element tensor to double
  template <class T> T item() const { return static_cast<T>(item()); }
  template <class T> std::vector<T> to_vector() const;  ///< any dtype/device, converted to T
  std::string str() const;                     ///< printable form (kernels/ops/print.cpp)

  // ---- math shortcuts (definitions forward to the free functions in kernels/ops/*.h) -----------------
  Tensor neg() const; Tensor exp() const; Tensor log() const; Tensor sqrt() const; Tensor abs() const;
  Tensor relu() const; Tensor sigmoid() const; Tensor tanh() const; Tensor gelu() const; Tensor silu() const;
  Tensor pow(double exponent) const;
  Tensor clamp(std::optional<double> lo, std::optional<double> hi) const;
  Tensor sum() const;
  Tensor sum(const std::vector<int64_t>& dims, bool keepdim = false) const;
  Tensor mean() const;
  Tensor mean(const std::vector<int64_t>& dims, bool keepdim = false) const;
  Tensor max() const;
  Tensor min() const;
  Tensor argmax(int64_t dim, bool keepdim = false) const;
  Tensor matmul(const Tensor& other) const;
  Tensor softmax(int64_t dim) const;
  Tensor log_softmax(int64_t dim) const;

 private:
  std::shared_ptr<TensorImpl> impl_;
};

/// Autograd state of a tensor. Leaves that require grad own `grad`; non-leaves point at the Node that made
/// them (grad_fn) and which of its outputs they are (output_nr).
struct AutogradMeta {
  bool requires_grad = false;
  Tensor grad;
  std::shared_ptr<Node> grad_fn;
  uint32_t output_nr = 0;
  std::shared_ptr<Node> grad_accumulator;  ///< created lazily for leaves that require grad
  std::vector<std::pair<int, GradHook>> grad_ready_hooks;
  int next_hook_id = 0;
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Shape strides;
  int64_t offset = 0;
  DType dtype = DType::f32;
  std::unique_ptr<AutogradMeta> autograd;  ///< null until needed
  AutogradMeta& meta() {
    if (!autograd) autograd = std::make_unique<AutogradMeta>();
    return *autograd;
  }
};

// ---- construction (kernels/tensor.cpp) -------------------------------------------------------------------
Shape contiguous_strides(const Shape& shape);
int64_t shape_numel(const Shape& shape);
std::string shape_to_string(const Shape& shape);
/// Normalises a possibly negative dim against `ndim`; `op` names the caller in the error.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op);

/// Uninitialised contiguous tensor.
Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = kCPU);
/// Uninitialised contiguous tensor in page-locked host memory (plain memory when CUDA is unavailable).
Tensor empty_pinned(const Shape& shape, DType dtype = DType::f32);
/// A tensor over existing storage with explicit geometry (no copy). Checks the view fits in the storage.
Tensor make_view(const Tensor& base, const Shape& shape, const Shape& strides, int64_t offset);
/// Copies `count` elements of `dtype` from host memory into a new tensor of `shape` on `device`.
Tensor from_blob(const void* host_data, const Shape& shape, DType dtype, Device device = kCPU);
template <class T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape, Device device = kCPU) {
  VOLT_CHECK(shape_numel(shape) == static_cast<int64_t>(values.size()), "from_vector: ", values.size(),
             " values do not fill shape ", shape_to_string(shape));
  return from_blob(values.data(), shape, dtype_of<T>::value, device);
}
template <class T>
Tensor from_vector(const std::vector<T>& values) {
  return from_vector(values, Shape{static_cast<int64_t>(values.size())});
}
Tensor scalar_tensor(double value, DType dtype = DType::f32, Device device = kCPU);

std::ostream& operator<<(std::ostream& os, const Tensor& t);

}  // namespace volt
