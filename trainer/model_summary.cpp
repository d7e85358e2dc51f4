#include <volt/trainer/model_summary.h>

#include <algorithm>
#include <sstream>
#include <vector>

#include <fmt/format.h>

namespace volt {

std::string human_count(int64_t n) {
  static const char* units[] = {"", " K", " M", " B", " T"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1000.0 && u < 4) {
    v /= 1000.0;
    ++u;
  }
  if (u == 0) return std::to_string(n);
  if (v >= 100) return fmt::format("{}{}", static_cast<int64_t>(v), units[u]);  // truncated
  return fmt::format("{:.1f}{}", v, units[u]);
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
  auto row = [&](const Row& r) {
    return fmt::format("{:<{}} | {:<{}} | {:<{}} | {:<{}} | {:<{}}", r.idx, w_idx, r.name, w_name, r.type, w_type,
                       r.params, w_params, r.mode, w_mode);
  };
  std::ostringstream os;
  const std::string header = row({"", "Name", "Type", "Params", "Mode"});
  const std::string rule(header.size(), '-');
  os << header << "\n" << rule << "\n";
  for (const auto& r : rows) os << row(r) << "\n";
  os << rule << "\n";
  int64_t total = module.num_parameters(false), trainable = module.num_parameters(true);
  double bytes = 0;
  for (const auto& [name, p] : module.named_parameters()) bytes += static_cast<double>(p.nbytes());
  auto line = [&](const std::string& v, const char* what) { os << fmt::format("{:<9} {}\n", v, what); };
  line(human_count(trainable), "Trainable params");
  line(human_count(total - trainable), "Non-trainable params");
  line(human_count(total), "Total params");
  line(fmt::format("{:.3f}", bytes / 1e6), "Total estimated model params size (MB)");
  if (!precision.empty()) line(precision, "Precision");
  return os.str();
}

}  // namespace volt
