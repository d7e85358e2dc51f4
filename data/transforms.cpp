#include "data/transforms.h"

namespace volt::data {

Tensor to_float(const Tensor& images) {
  VOLT_CHECK(images.defined() && images.dtype() == DType::u8 && !images.is_cuda(),
             "to_float: images must be a CPU u8 tensor, got ",
             images.defined() ? std::string(dtype_name(images.dtype())) + " on " + images.device().str()
                              : std::string("an undefined tensor"));
  Tensor src = images.contiguous();
  Tensor out = empty(src.shape(), DType::f32);
  const uint8_t* s = src.data<uint8_t>();
  float* d = out.data<float>();
  const int64_t n = src.numel();
  // Division (not multiplication by 1/255) so the values equal torchvision's byte.float().div(255) exactly.
  for (int64_t i = 0; i < n; ++i) d[i] = static_cast<float>(s[i]) / 255.0f;
  return out;
}

Tensor normalize(const Tensor& x, double mean, double std) {
  VOLT_CHECK(x.defined() && x.dtype() == DType::f32 && !x.is_cuda(), "normalize: x must be a CPU f32 tensor, got ",
             x.defined() ? std::string(dtype_name(x.dtype())) + " on " + x.device().str()
                         : std::string("an undefined tensor"));
  VOLT_CHECK(std > 0, "normalize: std must be positive, got ", std);
  Tensor src = x.detach().contiguous();
  Tensor out = empty(src.shape(), DType::f32);
  const float* s = src.data<float>();
  float* d = out.data<float>();
  const float m = static_cast<float>(mean), sd = static_cast<float>(std);
  const int64_t n = src.numel();
  for (int64_t i = 0; i < n; ++i) d[i] = (s[i] - m) / sd;
  return out;
}

Transform compose(std::vector<Transform> transforms) {
  return [ts = std::move(transforms)](const Tensor& x) {
    Tensor y = x;
    for (const auto& t : ts) y = t(y);
    return y;
  };
}

std::shared_ptr<TensorDataset> map_inputs(const TensorDataset& dataset, const Transform& transform) {
  Tensor inputs = transform(dataset.inputs());
  VOLT_CHECK(inputs.defined() && inputs.dim() >= 1 && inputs.size(0) == dataset.size(),
             "map_inputs: the transform returned ", inputs.defined() ? inputs.shape_str() : std::string("nothing"),
             " for inputs ", dataset.inputs().shape_str(), "; it must keep the first dimension (", dataset.size(), ")");
  return std::make_shared<TensorDataset>(inputs, dataset.targets());
}

}  // namespace volt::data
