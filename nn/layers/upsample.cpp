#include <volt/nn/layers/upsample.h>

#include <sstream>

namespace volt::nn {

Upsample::Upsample(UpsampleOptions o) : options(std::move(o)) {
  VOLT_CHECK(options.size.empty() != options.scale_factor.empty(),
             "Upsample: expected exactly one of size and scale_factor, got ",
             options.size.empty() ? "neither" : "both");
  VOLT_CHECK(options.size.size() <= 2 && options.scale_factor.size() <= 2,
             "Upsample: size and scale_factor take one value (both dims) or two (height, width)");
  for (int64_t s : options.size) VOLT_CHECK(s > 0, "Upsample: size values must be positive, got ", s);
  for (double s : options.scale_factor) VOLT_CHECK(s > 0, "Upsample: scale_factor values must be positive, got ", s);
  VOLT_CHECK(options.mode == InterpolateMode::Bilinear || !options.align_corners.has_value(),
             "Upsample: align_corners applies only to the bilinear mode; leave it unset for nearest");
}

std::string Upsample::extra_repr() const {
  std::ostringstream s;
  auto list = [&](const auto& v) {
    if (v.size() == 1) {
      s << v[0];
      return;
    }
    s << "(" << v[0] << ", " << v[1] << ")";
  };
  if (!options.size.empty()) {
    s << "size=";
    list(options.size);
  } else {
    s << "scale_factor=";
    list(options.scale_factor);
  }
  s << ", mode='" << (options.mode == InterpolateMode::Nearest ? "nearest" : "bilinear") << "'";
  if (options.align_corners.has_value()) s << ", align_corners=" << (*options.align_corners ? "True" : "False");
  return s.str();
}

}  // namespace volt::nn
