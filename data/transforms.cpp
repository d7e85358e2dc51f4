#include <volt/data/transforms.h>

#include <cstring>

#include <volt/kernels/ops.h>
#include <volt/runtime/philox.h>

namespace volt::data {

namespace {

std::string describe(const Tensor& t) {
  return t.defined() ? t.shape_str() + " " + dtype_name(t.dtype()) + " on " + t.device().str()
                     : std::string("an undefined tensor");
}

// One Philox counter of `gen`: four 32-bit random numbers.
philox::U4 draw(Generator& gen) { return philox::philox4x32_10(gen.reserve(1), 0, gen.seed()); }

// An integer uniform in [0, n) from 32 random bits (multiply-shift).
int64_t below(uint32_t bits, int64_t n) {
  return static_cast<int64_t>((static_cast<uint64_t>(bits) * static_cast<uint64_t>(n)) >> 32);
}

}  // namespace

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

// ---- per-sample random transforms ----------------------------------------------------------------------------

SampleTransform random_crop(int64_t height, int64_t width, int64_t padding, double fill) {
  VOLT_CHECK(height >= 1 && width >= 1 && padding >= 0, "random_crop: size must be >= 1 and padding >= 0, got ",
             height, "x", width, " with padding ", padding);
  return [=](Batch s, Generator& gen) {
    const Tensor& x = s.input;
    VOLT_CHECK(x.defined() && !x.is_cuda() && (x.dim() == 2 || x.dim() == 3),
               "random_crop: input must be a CPU (C, H, W) or (H, W) tensor, got ", describe(x));
    const int64_t H = x.size(-2), W = x.size(-1), C = x.dim() == 3 ? x.size(0) : 1;
    VOLT_CHECK(height <= H + 2 * padding && width <= W + 2 * padding, "random_crop: cannot crop ", height, "x",
               width, " from a ", H, "x", W, " image padded by ", padding, " (", H + 2 * padding, "x",
               W + 2 * padding, ")");
    const philox::U4 r = draw(gen);
    const int64_t top = below(r.x[0], H + 2 * padding - height + 1) - padding;
    const int64_t left = below(r.x[1], W + 2 * padding - width + 1) - padding;
    Shape shape = x.shape();
    shape[shape.size() - 2] = height;
    shape[shape.size() - 1] = width;
    Tensor out = full(shape, fill, x.dtype());
    Tensor src = x.detach().contiguous();
    const size_t item = itemsize(x.dtype());
    // The source columns [c0, c1) land at output column c0 - left.
    const int64_t c0 = std::max<int64_t>(left, 0), c1 = std::min<int64_t>(left + width, W);
    const char* in = static_cast<const char*>(src.data_ptr());
    char* o = static_cast<char*>(out.data_ptr());
    for (int64_t c = 0; c < C && c0 < c1; ++c)
      for (int64_t y = 0; y < height; ++y) {
        const int64_t sy = top + y;
        if (sy < 0 || sy >= H) continue;
        std::memcpy(o + ((c * height + y) * width + (c0 - left)) * item, in + ((c * H + sy) * W + c0) * item,
                    static_cast<size_t>(c1 - c0) * item);
      }
    s.input = out;
    return s;
  };
}

SampleTransform random_horizontal_flip(double p) {
  VOLT_CHECK(p >= 0 && p <= 1, "random_horizontal_flip: p must be in [0, 1], got ", p);
  return [p](Batch s, Generator& gen) {
    const Tensor& x = s.input;
    VOLT_CHECK(x.defined() && !x.is_cuda() && x.dim() >= 1,
               "random_horizontal_flip: input must be a CPU tensor of at least 1 dim, got ", describe(x));
    if (!(philox::uniform(draw(gen).x[0]) < p)) return s;
    Tensor src = x.detach().contiguous();
    Tensor out = empty(src.shape(), src.dtype());
    const size_t item = itemsize(src.dtype());
    const int64_t W = src.size(-1), rows = W == 0 ? 0 : src.numel() / W;
    const char* in = static_cast<const char*>(src.data_ptr());
    char* o = static_cast<char*>(out.data_ptr());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < W; ++c) std::memcpy(o + (r * W + c) * item, in + (r * W + W - 1 - c) * item, item);
    s.input = out;
    return s;
  };
}

SampleTransform gaussian_noise(double std, double mean) {
  VOLT_CHECK(std >= 0, "gaussian_noise: std must be >= 0, got ", std);
  return [std, mean](Batch s, Generator& gen) {
    const Tensor& x = s.input;
    VOLT_CHECK(x.defined() && !x.is_cuda() && x.dtype() == DType::f32,
               "gaussian_noise: input must be a CPU f32 tensor, got ", describe(x));
    Tensor out = randn(x.shape(), DType::f32, kCPU, &gen, mean, std);
    Tensor src = x.detach().contiguous();
    const float* in = src.data<float>();
    float* o = out.data<float>();
    for (int64_t i = 0; i < src.numel(); ++i) o[i] += in[i];
    s.input = out;
    return s;
  };
}

SampleTransform compose(std::vector<SampleTransform> transforms) {
  for (size_t k = 0; k < transforms.size(); ++k)
    VOLT_CHECK(transforms[k] != nullptr, "compose: sample transform ", k, " is empty");
  return [ts = std::move(transforms)](Batch s, Generator& gen) {
    for (const auto& t : ts) s = t(std::move(s), gen);
    return s;
  };
}

}  // namespace volt::data
