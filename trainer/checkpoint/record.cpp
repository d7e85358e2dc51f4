// Validated parsing of the trainer-state record (<stem>.json) and of "optimizer.<i>.<key>" tensor names.
#include <cmath>

#include <volt/runtime/error.h>
#include <volt/trainer/checkpoint/record.h>

namespace volt {

namespace {

using json = nlohmann::json;

std::string type_of(const json& v) { return v.type_name(); }

std::string shown(const json& v) {
  std::string s = v.dump();
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

const json& member(const json& obj, const std::string& key, const std::string& path, const std::string& source) {
  VOLT_CHECK(obj.is_object(), "checkpoint ", source, ": '", path.empty() ? "<record>" : path, "' must be an object, got ",
             type_of(obj), " ", shown(obj));
  auto it = obj.find(key);
  VOLT_CHECK(it != obj.end(), "checkpoint ", source, ": the trainer-state record has no key '",
             path.empty() ? key : path + "." + key, "'");
  return *it;
}

std::string join(const std::string& path, const std::string& key) { return path.empty() ? key : path + "." + key; }

int64_t get_count(const json& obj, const std::string& key, const std::string& path, const std::string& source,
                  int64_t lo, int64_t hi) {
  const json& v = member(obj, key, path, source);
  VOLT_CHECK(v.is_number_integer(), "checkpoint ", source, ": '", join(path, key), "' must be an integer, got ",
             type_of(v), " ", shown(v));
  // A huge unsigned value does not fit int64: reject before converting.
  VOLT_CHECK(!v.is_number_unsigned() || v.get<uint64_t>() <= static_cast<uint64_t>(hi), "checkpoint ", source, ": '",
             join(path, key), "' = ", shown(v), " is out of range; expected ", lo, " to ", hi);
  const int64_t x = v.get<int64_t>();
  VOLT_CHECK(x >= lo && x <= hi, "checkpoint ", source, ": '", join(path, key), "' = ", x, " is out of range; expected ",
             lo, " to ", hi);
  return x;
}

uint64_t get_unsigned(const json& obj, const std::string& key, const std::string& path, const std::string& source) {
  const json& v = member(obj, key, path, source);
  VOLT_CHECK(v.is_number_unsigned(), "checkpoint ", source, ": '", join(path, key),
             "' must be a non-negative integer, got ", type_of(v), " ", shown(v));
  return v.get<uint64_t>();
}

std::string get_string(const json& obj, const std::string& key, const std::string& path, const std::string& source) {
  const json& v = member(obj, key, path, source);
  VOLT_CHECK(v.is_string(), "checkpoint ", source, ": '", join(path, key), "' must be a string, got ", type_of(v), " ",
             shown(v));
  return v.get<std::string>();
}

std::map<std::string, double> get_number_map(const json& obj, const std::string& key, const std::string& path,
                                             const std::string& source) {
  const json& v = member(obj, key, path, source);
  VOLT_CHECK(v.is_object(), "checkpoint ", source, ": '", join(path, key), "' must be an object of numbers, got ",
             type_of(v), " ", shown(v));
  std::map<std::string, double> out;
  for (auto it = v.begin(); it != v.end(); ++it) {
    VOLT_CHECK(it.value().is_number(), "checkpoint ", source, ": '", join(join(path, key), it.key()),
               "' must be a number, got ", type_of(it.value()), " ", shown(it.value()));
    const double x = it.value().get<double>();
    VOLT_CHECK(std::isfinite(x), "checkpoint ", source, ": '", join(join(path, key), it.key()), "' = ", x,
               " must be finite");
    out[it.key()] = x;
  }
  return out;
}

const json& get_array(const json& obj, const std::string& key, const std::string& source) {
  const json& v = member(obj, key, "", source);
  VOLT_CHECK(v.is_array(), "checkpoint ", source, ": '", key, "' must be an array, got ", type_of(v), " ", shown(v));
  return v;
}

}  // namespace

TrainerStateRecord parse_trainer_state(const json& j, const std::string& source) {
  VOLT_CHECK(j.is_object(), "checkpoint ", source, ": the trainer-state record must be a JSON object, got ", type_of(j));
  TrainerStateRecord r;
  VOLT_CHECK(get_string(j, "format", "", source) == "volt-checkpoint", "checkpoint ", source, ": 'format' is \"",
             j.at("format").get<std::string>(), "\"; expected \"volt-checkpoint\" (not a Volt checkpoint record)");
  r.version = get_count(j, "version", "", source, 1, 1);
  r.epoch = get_count(j, "epoch", "", source, 0, kMaxCheckpointCounter);
  r.global_step = get_count(j, "global_step", "", source, 0, kMaxCheckpointCounter);
  r.epoch_batches = get_count(j, "epoch_batches", "", source, 0, kMaxCheckpointCounter);
  r.batches_done = get_count(j, "batches_done", "", source, 0, kMaxCheckpointCounter);
  VOLT_CHECK(r.batches_done <= r.epoch_batches, "checkpoint ", source, ": 'batches_done' = ", r.batches_done,
             " exceeds 'epoch_batches' = ", r.epoch_batches, "; expected 0 <= batches_done <= epoch_batches");

  const json& opts = get_array(j, "optimizers", source);
  for (size_t i = 0; i < opts.size(); ++i) {
    const std::string path = "optimizers[" + std::to_string(i) + "]";
    r.optimizers.push_back({get_string(opts[i], "type", path, source), get_number_map(opts[i], "hyper", path, source)});
  }
  const json& scheds = get_array(j, "schedulers", source);
  for (size_t i = 0; i < scheds.size(); ++i) {
    const std::string path = "schedulers[" + std::to_string(i) + "]";
    SchedulerRecord s;
    s.type = get_string(scheds[i], "type", path, source);
    const std::string interval = get_string(scheds[i], "interval", path, source);
    VOLT_CHECK(interval == "epoch" || interval == "step", "checkpoint ", source, ": '", path, ".interval' is \"",
               interval, "\"; expected \"epoch\" or \"step\"");
    s.interval = parse_scheduler_interval(interval);
    s.frequency = get_count(scheds[i], "frequency", path, source, 1, kMaxCheckpointCounter);
    s.state = get_number_map(scheds[i], "state", path, source);
    r.schedulers.push_back(std::move(s));
  }
  r.callbacks = member(j, "callbacks", "", source);
  VOLT_CHECK(r.callbacks.is_object(), "checkpoint ", source, ": 'callbacks' must be an object, got ",
             type_of(r.callbacks), " ", shown(r.callbacks));
  const json& rng = member(j, "rng", "", source);
  r.rng_seed = get_unsigned(rng, "seed", "rng", source);
  r.rng_offset = get_unsigned(rng, "offset", "rng", source);
  r.hparams = member(j, "hparams", "", source);  // whatever the module saved (save_hyperparameters)
  if (j.contains("precision")) r.precision = get_string(j, "precision", "", source);
  if (j.contains("grad_scaler") && !j["grad_scaler"].is_null()) {
    const json& gs = j["grad_scaler"];
    GradScalerRecord g;
    const json& sv = member(gs, "scale", "grad_scaler", source);
    VOLT_CHECK(sv.is_number() && std::isfinite(sv.get<double>()) && sv.get<double>() > 0, "checkpoint ", source,
               ": 'grad_scaler.scale' = ", shown(sv), "; expected a finite number > 0");
    g.scale = sv.get<double>();
    g.growth_tracker = get_count(gs, "growth_tracker", "grad_scaler", source, 0, kMaxCheckpointCounter);
    g.skipped = get_count(gs, "skipped", "grad_scaler", source, 0, kMaxCheckpointCounter);
    r.grad_scaler = g;
  }
  // "loader" is derived from epoch / batches_done; when present it must agree with them.
  if (j.contains("loader")) {
    const json& ld = j["loader"];
    const int64_t e = get_count(ld, "epoch", "loader", source, 0, kMaxCheckpointCounter);
    const int64_t b = get_count(ld, "batches_consumed", "loader", source, 0, kMaxCheckpointCounter);
    VOLT_CHECK(e == r.epoch && b == r.batches_done, "checkpoint ", source, ": 'loader' = {epoch ", e,
               ", batches_consumed ", b, "} disagrees with epoch ", r.epoch, " and batches_done ", r.batches_done);
  }
  return r;
}

size_t parse_optimizer_key(const std::string& key, const std::string& source, std::string* rest) {
  static const std::string kPrefix = "optimizer.";
  VOLT_CHECK(key.rfind(kPrefix, 0) == 0, "checkpoint ", source, ": tensor '", key,
             "' is not an optimizer key; expected optimizer.<index>.<name>");
  const size_t dot = key.find('.', kPrefix.size());
  const size_t ndigits = dot == std::string::npos ? 0 : dot - kPrefix.size();
  bool digits = ndigits >= 1 && ndigits <= 6;
  for (size_t i = 0; digits && i < ndigits; ++i) digits = key[kPrefix.size() + i] >= '0' && key[kPrefix.size() + i] <= '9';
  VOLT_CHECK(digits && dot + 1 < key.size(), "checkpoint ", source, ": tensor '", key,
             "' is malformed; expected optimizer.<index>.<name> with a decimal index of at most 6 digits");
  if (rest) *rest = key.substr(dot + 1);
  return static_cast<size_t>(std::stoul(key.substr(kPrefix.size(), ndigits)));
}

}  // namespace volt
