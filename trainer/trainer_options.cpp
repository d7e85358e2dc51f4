#include <volt/trainer/trainer_options.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include <volt/runtime/error.h>

namespace volt {

int64_t BatchAmount::resolve(int64_t total, const char* what) const {
  if (is_fraction) {
    VOLT_CHECK(fraction >= 0.0 && fraction <= 1.0, "Trainer: ", what, "=", fraction,
               " is not a valid fraction; expected a float in [0, 1] or an integer batch count");
    if (fraction == 1.0) return total;
    return static_cast<int64_t>(std::floor(static_cast<double>(total) * fraction));
  }
  VOLT_CHECK(count >= 0, "Trainer: ", what, "=", count, " is negative; expected a batch count >= 0");
  return std::min(count, total);
}

double parse_max_time(const std::string& s) {
  if (s.empty()) return -1;
  if (s.find(':') == std::string::npos) {
    size_t used = 0;
    double v = 0;
    try {
      v = std::stod(s, &used);
    } catch (...) {
      used = 0;
    }
    VOLT_CHECK(used == s.size() && v >= 0, "Trainer: max_time=\"", s,
               "\" is not valid; expected \"DD:HH:MM:SS\" or a number of seconds");
    return v;
  }
  std::vector<int64_t> parts;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ':')) {
    size_t used = 0;
    int64_t v = -1;
    try {
      v = std::stoll(item, &used);
    } catch (...) {
      used = 0;
    }
    VOLT_CHECK(used == item.size() && !item.empty() && v >= 0, "Trainer: max_time=\"", s,
               "\" is not valid; expected \"DD:HH:MM:SS\" with non-negative integers");
    parts.push_back(v);
  }
  VOLT_CHECK(parts.size() == 4, "Trainer: max_time=\"", s, "\" has ", parts.size(),
             " fields; expected \"DD:HH:MM:SS\"");
  return ((parts[0] * 24 + parts[1]) * 60 + parts[2]) * 60.0 + parts[3];
}

void TrainerOptions::validate() const {
  VOLT_CHECK(accumulate_grad_batches >= 1, "Trainer: accumulate_grad_batches=", accumulate_grad_batches,
             " must be >= 1");
  VOLT_CHECK(check_val_every_n_epoch >= 1, "Trainer: check_val_every_n_epoch=", check_val_every_n_epoch,
             " must be >= 1");
  VOLT_CHECK(log_every_n_steps >= 1, "Trainer: log_every_n_steps=", log_every_n_steps, " must be >= 1");
  VOLT_CHECK(gradient_clip_val >= 0, "Trainer: gradient_clip_val=", gradient_clip_val, " must be >= 0");
  VOLT_CHECK(gradient_clip_algorithm == GradClipAlgorithm::norm ||
                 gradient_clip_algorithm == GradClipAlgorithm::value,
             "Trainer: gradient_clip_algorithm=", static_cast<int>(gradient_clip_algorithm),
             " is not a GradClipAlgorithm value");
  VOLT_CHECK(checkpoint_layout == CheckpointLayout::full || checkpoint_layout == CheckpointLayout::sharded,
             "Trainer: checkpoint_layout=", static_cast<int>(checkpoint_layout), " is not a CheckpointLayout value");
  VOLT_CHECK(max_epochs >= -1, "Trainer: max_epochs=", max_epochs, "; expected -1 (default) or >= 0");
  VOLT_CHECK(max_steps >= -1, "Trainer: max_steps=", max_steps, "; expected -1 (no limit) or >= 0");
  VOLT_CHECK(val_check_interval.is_fraction ? val_check_interval.fraction > 0
                                                 : val_check_interval.count > 0,
             "Trainer: val_check_interval must be a fraction in (0, 1] or a batch count >= 1");
  if (val_check_interval.is_fraction)
    VOLT_CHECK(val_check_interval.fraction <= 1.0, "Trainer: val_check_interval=",
               val_check_interval.fraction, " as a fraction must be in (0, 1]");
  VOLT_CHECK(fast_dev_run >= 0, "Trainer: fast_dev_run=", fast_dev_run,
             " must be >= 0 (0 = off, n = run n batches of each loop)");
  VOLT_CHECK(reload_dataloaders_every_n_epochs >= 0, "Trainer: reload_dataloaders_every_n_epochs=",
             reload_dataloaders_every_n_epochs, " must be >= 0 (0 = load once)");
  const BatchAmount& ob = overfit_batches;
  VOLT_CHECK(ob.is_fraction ? ob.fraction >= 0 && ob.fraction <= 1 : ob.count >= 0, "Trainer: overfit_batches=",
             ob.is_fraction ? std::to_string(ob.fraction) : std::to_string(ob.count),
             "; expected a batch count >= 0 or a fraction in [0, 1] (0 = off)");
}

}  // namespace volt
