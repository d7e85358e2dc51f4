#include <volt/trainer/model_summary.h>

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <vector>

namespace volt {

std::string human_count(int64_t n) {
  static const char* units[] = {"", " K", " M", " B", " T"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1000.0 && u < 4) {
    v /= 1000.0;
    ++u;
  }
  char buf[32];
  if (u == 0) std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(n));
  else if (v >= 100) std::snprintf(buf, sizeof buf, "%lld%s", static_cast<long long>(v), units[u]);  // truncated
  else std::snprintf(buf, sizeof buf, "%.1f%s", v, units[u]);
  return buf;
}

std::string model_summary(const nn::Module& module, const std::string& precision) {
  struct Row {
    std::string idx, name, type, params, mode;
  };
  std::vector<Row> rows;
  int i = 0;
  for (const auto& [name, child] : module.named_children())
    rows.push_back({std::to_string(i++), name, child->type_name(), human_count(child->num_parameters()),
                    child->is_training() ? "train" : "eval"});
  size_t w_idx = 1, w_name = 4, w_type = 4, w_params = 6, w_mode = 4;
  for (const auto& r : rows) {
    w_idx = std::max(w_idx, r.idx.size());
    w_name = std::max(w_name, r.name.size());
    w_type = std::max(w_type, r.type.size());
    w_params = std::max(w_params, r.params.size());
    w_mode = std::max(w_mode, r.mode.size());
  }
  auto pad = [](const std::string& s, size_t w) { return s.size() >= w ? s : s + std::string(w - s.size(), ' '); };
  std::ostringstream os;
  std::string header = std::string(w_idx, ' ') + " | " + pad("Name", w_name) + " | " + pad("Type", w_type) + " | " +
                       pad("Params", w_params) + " | " + pad("Mode", w_mode);
  std::string rule(header.size(), '-');
  os << header << "\n" << rule << "\n";
  for (const auto& r : rows)
    os << pad(r.idx, w_idx) << " | " << pad(r.name, w_name) << " | " << pad(r.type, w_type) << " | "
       << pad(r.params, w_params) << " | " << pad(r.mode, w_mode) << "\n";
  os << rule << "\n";
  int64_t total = module.num_parameters(false), trainable = module.num_parameters(true);
  double bytes = 0;
  for (const auto& [name, p] : module.named_parameters()) bytes += static_cast<double>(p.nbytes());
  char mb[32];
  std::snprintf(mb, sizeof mb, "%.3f", bytes / 1e6);
  auto line = [&](const std::string& v, const char* what) { os << pad(v, 9) << " " << what << "\n"; };
  line(human_count(trainable), "Trainable params");
  line(human_count(total - trainable), "Non-trainable params");
  line(human_count(total), "Total params");
  line(mb, "Total estimated model params size (MB)");
  if (!precision.empty()) line(precision, "Precision");
  return os.str();
}

}  // namespace volt
