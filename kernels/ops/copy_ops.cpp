#include <volt/kernels/backend/elementwise.h>
#include <volt/kernels/backend/registry.h>
#include <volt/kernels/graph.h>
#include <volt/kernels/grad.h>
#include <volt/kernels/ops.h>
#include <volt/runtime/cuda_api.h>

namespace volt {

namespace {
void check_inplace(const Tensor& t, const char* op) {
  VOLT_CHECK(t.defined(), op, ": the tensor is undefined");
  VOLT_CHECK(!(autograd::grad_enabled() && t.requires_grad()), op, ": in-place update of a tensor that requires "
             "grad while grad mode is on; wrap it in a NoGradGuard (as optimizers do) or use detach()");
}
}  // namespace

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  Tensor out = empty(shape(), dtype(), device());
  backend::call<&backend::ElementwiseKernels::cast>(device(), out.dtype(), out, *this);
  autograd::attach_differentiable(out, "ContiguousBackward", {*this}, [](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{g[0]};
  });
  return out;
}

Tensor Tensor::clone() const {
  Tensor out = empty(shape(), dtype(), device());
  backend::call<&backend::ElementwiseKernels::cast>(device(), out.dtype(), out, *this);
  autograd::attach_differentiable(out, "CloneBackward", {*this}, [](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{g[0]};
  });
  return out;
}

Tensor Tensor::to(DType dt) const {
  if (dt == dtype()) return *this;
  Tensor out = empty(shape(), dt, device());
  backend::call<&backend::ElementwiseKernels::cast>(device(), out.dtype(), out, *this);
  if (is_floating(dt) && is_floating(dtype())) {
    DType src = dtype();
    autograd::attach_differentiable(out, "CastBackward", {*this}, [src](const std::vector<Tensor>& g) {
      return std::vector<Tensor>{g[0].to(src)};
    });
  }
  return out;
}

Tensor cast(const Tensor& a, DType dtype) { return a.to(dtype); }

Tensor Tensor::to(Device dev, bool non_blocking) const {
  if (dev == device()) return *this;
  check_device_usable(dev, "Tensor::to");
  // A copy to the host cannot be captured; one from the host would capture a copy of host memory that may be
  // gone at replay (upload before the capture instead).
  Graph::check_not_capturing(device(), "a copy of a tensor to another device");
  Graph::check_not_capturing(dev, "a copy of a tensor from another device");
  Tensor src = contiguous();
  Tensor out = empty(shape(), dtype(), dev);
  Stream s;
  bool async = non_blocking && (dev.is_cuda() && src.storage()->pinned);
  if (async) s = get_stream(dev, StreamKind::Compute);
  copy_bytes(out.data_ptr(), dev, src.data_ptr(), src.device(), out.nbytes(), async ? &s : nullptr);
  if (async) keep_alive_until_done(src.storage(), s);  // the pinned buffer must outlive the queued copy
  Device from = device();
  autograd::attach_differentiable(out, "ToDeviceBackward", {*this}, [from](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{g[0].to(from)};
  });
  return out;
}

Tensor Tensor::to(Device dev, DType dt) const { return to(dev).to(dt); }
Tensor Tensor::cuda(int index) const { return to(cuda_device(index)); }

Tensor& Tensor::copy_(const Tensor& src) {
  check_inplace(*this, "copy_");
  VOLT_CHECK(src.defined(), "copy_: the source tensor is undefined");
  Tensor s = src.detach();
  if (s.shape() != shape()) {
    Shape b = broadcast_shapes(shape(), s.shape(), "copy_");
    VOLT_CHECK(b == shape(), "copy_: source of shape ", s.shape_str(), " cannot be broadcast to ", shape_str());
    s = s.expand(shape());
  }
  if (s.device() != device()) s = s.contiguous().to(device());
  NoGradGuard ng;
  backend::call<&backend::ElementwiseKernels::cast>(device(), dtype(), *this, s);
  return *this;
}

Tensor& Tensor::fill_(double value) {
  check_inplace(*this, "fill_");
  // The Fill loop loads each element before replacing it; a fresh bool buffer can hold bytes other than 0/1,
  // and loading those as bool is undefined, so zero it first.
  if (dtype() == DType::boolean && is_contiguous() && numel() > 0) memset_zero(data_ptr(), device(), nbytes());
  ElemParams p;
  p.a = value;
  backend::call<&backend::ElementwiseKernels::unary>(device(), dtype(), UnaryOp::Fill, *this, *this, p);
  return *this;
}

double Tensor::item() const {
  VOLT_CHECK(defined(), "item: the tensor is undefined");
  VOLT_CHECK(numel() == 1, "item: only a one-element tensor converts to a number, this one has shape ", shape_str(),
             " (", numel(), " elements)");
  Graph::check_not_capturing(device(), "item()");
  NoGradGuard ng;
  Tensor h = to(kCPU).to(DType::f64);
  return *static_cast<const double*>(h.data_ptr());
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  VOLT_CHECK(defined(), "to_vector: the tensor is undefined");
  Graph::check_not_capturing(device(), "to_vector()");
  NoGradGuard ng;
  Tensor h = to(kCPU).to(dtype_of<T>::value).contiguous();
  const T* p = static_cast<const T*>(h.data_ptr());
  return std::vector<T>(p, p + h.numel());
}
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;
template std::vector<int32_t> Tensor::to_vector<int32_t>() const;
template std::vector<uint8_t> Tensor::to_vector<uint8_t>() const;
template std::vector<int8_t> Tensor::to_vector<int8_t>() const;

}  // namespace volt
