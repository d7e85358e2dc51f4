#include <volt/trainer/cli/option_table.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <iterator>
#include <limits>
#include <sstream>
#include <type_traits>

#include <volt/runtime/error.h>
#include <volt/runtime/log.h>
#include <volt/trainer/profilers/profiler.h>
#include <volt/trainer/strategies/registry.h>

namespace volt::cli {

namespace {

std::string join(const std::vector<std::string>& items, const char* sep) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : sep) + s;
  return out;
}

// ---- checks: the messages --help users and the tests know ----

OptionCheck at_least(long long lo) {
  return {">= " + std::to_string(lo), [lo](const std::string& s) -> std::string {
            char* end = nullptr;
            const long long v = std::strtoll(s.c_str(), &end, 10);
            if (s.empty() || end != s.c_str() + s.size()) return "expected an integer, got '" + s + "'";
            if (v < lo) return "must be >= " + std::to_string(lo) + ", got " + s;
            return "";
          }};
}

OptionCheck non_negative_real() {
  return {">= 0", [](const std::string& s) -> std::string {
            char* end = nullptr;
            const double v = std::strtod(s.c_str(), &end);
            if (s.empty() || end != s.c_str() + s.size()) return "expected a number, got '" + s + "'";
            if (!std::isfinite(v) || v < 0) return "must be a finite number >= 0, got " + s;
            return "";
          }};
}

std::string not_one_of(const std::string& s, const std::vector<std::string>& allowed) {
  for (const auto& a : allowed)
    if (s == a) return "";
  return "got '" + s + "'; expected one of " + join(allowed, ", ");
}

OptionCheck one_of(std::vector<std::string> allowed) {
  return {join(allowed, ", "), [allowed](const std::string& s) { return not_one_of(s, allowed); }};
}

// The registry's names when the text is checked, so a strategy registered after the flags were added counts too.
OptionCheck one_of_strategies() {
  return {join(strategy_names(), ", "), [](const std::string& s) { return not_one_of(s, strategy_names()); }};
}

// A check that runs `parse` and reports its volt::Error text.
template <class Parse>
OptionCheck parsed_by(Parse parse, std::string description) {
  return {std::move(description), [parse](const std::string& s) -> std::string {
            try {
              parse(s);
            } catch (const Error& e) {
              return e.what();
            }
            return "";
          }};
}

OptionCheck batch_amount() {
  return parsed_by([](const std::string& s) { parse_batch_amount(s, ""); }, "COUNT|FRACTION");
}

// ---- text of values ----

std::string real_text(double v) {  // as CLI11 and an ostream print it: 65536, 2, 0.5
  std::ostringstream os;
  os << v;
  return os.str();
}

std::string batch_amount_text(const BatchAmount& b) {
  if (!b.is_fraction) return std::to_string(b.count);
  std::string s = real_text(b.fraction);
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";  // keep it a fraction when read back
  return s;
}

std::vector<std::string> split_names(const std::string& names) {
  std::vector<std::string> out;
  std::string::size_type start = 0;
  while (start <= names.size()) {
    const auto comma = std::min(names.find(',', start), names.size());
    if (comma > start) out.push_back(names.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

std::optional<bool> bool_value(const std::string& s) {
  for (const char* t : {"true", "1", "yes", "on"})
    if (s == t) return true;
  for (const char* f : {"false", "0", "no", "off"})
    if (s == f) return false;
  return std::nullopt;
}

template <class Int>
std::string integer_problem(const std::string& s) {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || end != s.c_str() + s.size()) return "expected an integer, got '" + s + "'";
  if (errno == ERANGE || v < std::numeric_limits<Int>::min() || v > std::numeric_limits<Int>::max())
    return "must be an integer from " + std::to_string(std::numeric_limits<Int>::min()) + " to " +
           std::to_string(std::numeric_limits<Int>::max()) + ", got " + s;
  return "";
}

// Rows: the field's path written once, as the row's name and as the function reaching the field.
#define VOLT_FIELD(path) #path, +[](TrainerOptions& o) -> decltype((o.path)) { return o.path; }

std::string flag_of(const std::string& name) {
  std::string flag = "--" + name;
  for (char& c : flag)
    if (c == '_' || c == '.') c = '-';
  return flag;
}

template <class T>
OptionField row(const char* name, FieldRef<T> ref, std::string help, OptionCheck check = {}, std::string negation = "") {
  return {name, flag_of(name), std::move(negation), std::move(help), OptionAccess(ref), std::move(check)};
}

OptionField text_row(const char* name, TextField field, std::string help, OptionCheck check) {
  return {name, flag_of(name), "", std::move(help), OptionAccess(field), std::move(check)};
}

}  // namespace

BatchAmount parse_batch_amount(const std::string& s, const std::string& flag) {
  const std::string prefix = flag.empty() ? "" : flag + ": ";
  const bool fraction = s.find_first_of(".eE") != std::string::npos;
  char* end = nullptr;
  if (fraction) {
    const double v = std::strtod(s.c_str(), &end);
    VOLT_CHECK(!s.empty() && end == s.c_str() + s.size() && std::isfinite(v) && v >= 0 && v <= 1, prefix,
               "expected a batch count (e.g. 10) or a fraction of the epoch in [0, 1] (e.g. 0.25), got '", s, "'");
    return BatchAmount(v);
  }
  errno = 0;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  VOLT_CHECK(!s.empty() && end == s.c_str() + s.size() && v >= 0 && errno != ERANGE &&
                 !std::isspace(static_cast<unsigned char>(s[0])),
             prefix, "expected a batch count (e.g. 10) or a fraction of the epoch in [0, 1] (e.g. 0.25), got '", s,
             "'");
  return BatchAmount(static_cast<int64_t>(v));
}

namespace {

// The table in four parts, in the order --help lists them.
std::vector<OptionField> hardware_rows() {
  const std::vector<std::string> strategies = strategy_names();
  return {
      row(VOLT_FIELD(accelerator), "cpu | gpu | auto", one_of({"cpu", "gpu", "cuda", "auto"})),
      row(VOLT_FIELD(devices), "auto | N | -1 | ids like '0,1'"),
      row(VOLT_FIELD(auto_select_gpus), "with --devices N: N GPUs no other process uses"),
      row(VOLT_FIELD(strategy), join(strategies, " | "), one_of_strategies()),
      row(VOLT_FIELD(fsdp_min_num_params),
          "fsdp: a submodule with at least this many parameters (not yet wrapped) becomes a unit; 0: off", at_least(0)),
      row(VOLT_FIELD(fsdp_wrap), "fsdp: comma-separated dotted module names that become units ('encoder,decoder.l1')"),
      row(VOLT_FIELD(dp_replicas),
          "dp/ddp2 on CPU devices: a module replica per device (TrainModule::make_replica), as on GPUs"),
      row(VOLT_FIELD(num_nodes), "machines in a ddp job: world size = num_nodes x devices", at_least(1)),
      row(VOLT_FIELD(precision), "32-true | 16-mixed | bf16-mixed | 16-true | bf16-true | 64-true",
          parsed_by([](const std::string& s) { parse_precision(s); }, "PRECISION")),
      row(VOLT_FIELD(grad_scaler.init_scale), "16-mixed: initial loss scale", non_negative_real()),
      row(VOLT_FIELD(grad_scaler.growth_factor), "16-mixed: scale growth factor", non_negative_real()),
      row(VOLT_FIELD(grad_scaler.backoff_factor), "16-mixed: scale backoff factor", non_negative_real()),
      row(VOLT_FIELD(grad_scaler.growth_interval), "16-mixed: clean steps before the scale grows", at_least(1)),
  };
}

std::vector<OptionField> loop_rows() {
  return {
      row(VOLT_FIELD(max_epochs), "-1: 1000 unless --max-steps is set", at_least(-1)),
      row(VOLT_FIELD(min_epochs), "epochs before early stopping may stop", at_least(0)),
      row(VOLT_FIELD(max_steps), "optimizer steps; -1 = no limit", at_least(-1)),
      row(VOLT_FIELD(min_steps), "steps before early stopping may stop", at_least(0)),
      row(VOLT_FIELD(max_time), "DD:HH:MM:SS or seconds; stop after this long",
          parsed_by([](const std::string& s) { parse_max_time(s); }, "TIME")),
      row(VOLT_FIELD(val_check_interval), "validate every N training batches, or every fraction of the epoch",
          batch_amount()),
      row(VOLT_FIELD(check_val_every_n_epoch), "validate every N epochs", at_least(1)),
      row(VOLT_FIELD(limit_train_batches), "training batches per epoch: a count or a fraction", batch_amount()),
      row(VOLT_FIELD(limit_val_batches), "validation batches: a count or a fraction", batch_amount()),
      row(VOLT_FIELD(limit_test_batches), "test batches: a count or a fraction", batch_amount()),
      row(VOLT_FIELD(limit_predict_batches), "predict batches: a count or a fraction", batch_amount()),
      row(VOLT_FIELD(num_sanity_val_steps), "validation batches before fit; -1 = all", at_least(-1)),
      row(VOLT_FIELD(accumulate_grad_batches), "batches per optimizer step", at_least(1)),
      row(VOLT_FIELD(gradient_clip_val), "clip gradients at this norm/value; 0 = off", non_negative_real()),
      text_row("gradient_clip_algorithm",
               {[](TrainerOptions& o, const std::string& s) { o.gradient_clip_algorithm = parse_gradient_clip_algorithm(s); },
                [](const TrainerOptions& o) { return std::string(name(o.gradient_clip_algorithm)); }},
               "norm | value", one_of({"norm", "value"})),
  };
}

OptionField on_nonfinite_loss_row() {
  return text_row("on_nonfinite_loss",
                  {[](TrainerOptions& o, const std::string& s) {
                     o.on_nonfinite_loss = s == "skip"   ? NonFiniteLoss::skip
                                           : s == "stop" ? NonFiniteLoss::stop
                                                         : NonFiniteLoss::ignore;
                   },
                   [](const TrainerOptions& o) {
                     return std::string(o.on_nonfinite_loss == NonFiniteLoss::skip   ? "skip"
                                        : o.on_nonfinite_loss == NonFiniteLoss::stop ? "stop"
                                                                                     : "ignore");
                   }},
                  "ignore | skip | stop: a step whose loss is NaN/Inf", one_of({"ignore", "skip", "stop"}));
}

OptionField cuda_graphs_row() {
  return text_row("cuda_graphs",
                  {[](TrainerOptions& o, const std::string& s) {
                     o.cuda_graphs = s == "on" ? CudaGraphs::on : s == "off" ? CudaGraphs::off : CudaGraphs::automatic;
                   },
                   [](const TrainerOptions& o) {
                     return std::string(o.cuda_graphs == CudaGraphs::on    ? "on"
                                        : o.cuda_graphs == CudaGraphs::off ? "off"
                                                                           : "auto");
                   }},
                  "auto | on | off: capture the training step as a graph and replay it (auto: on a GPU, for a module "
                  "that declares a static step)",
                  one_of({"auto", "on", "off"}));
}

std::vector<OptionField> behaviour_rows() {
  std::vector<OptionField> rows = {
      text_row("checkpoint_layout",
               {[](TrainerOptions& o, const std::string& s) { o.checkpoint_layout = parse_checkpoint_layout(s); },
                [](const TrainerOptions& o) { return std::string(name(o.checkpoint_layout)); }},
               "full | sharded: zero1/zero2 checkpoints gathered by rank 0, or one shard file per rank",
               one_of({"full", "sharded"})),
      row(VOLT_FIELD(deterministic), "deterministic algorithms (no TF32)"),
      row(VOLT_FIELD(benchmark),
          "cuDNN convolution algorithms by timed trials (true) or heuristics (false); unset: as the process has it "
          "(false under --deterministic)",
          {}, "--no-benchmark"),
      row(VOLT_FIELD(detect_anomaly), "find the first op producing NaN/Inf (slow)"),
  };
  rows.push_back(on_nonfinite_loss_row());
  rows.push_back(cuda_graphs_row());
  return rows;
}

std::vector<OptionField> logging_rows() {
  return {
      row(VOLT_FIELD(enable_progress_bar), "the progress bar", {}, "--no-progress-bar"),
      row(VOLT_FIELD(enable_model_summary), "print the model summary before fit", {}, "--no-model-summary"),
      row(VOLT_FIELD(enable_checkpointing), "a default ModelCheckpoint (last epoch)", {}, "--no-checkpointing"),
      row(VOLT_FIELD(default_root_dir), "where logs and checkpoints go"),
      row(VOLT_FIELD(log_every_n_steps), "step rows to the loggers every N steps", at_least(1)),
      row(VOLT_FIELD(log_level),
          "trace | debug | info | warn | error | off: Volt's messages on stderr (default: VOLT_LOG_LEVEL, else info)",
          parsed_by([](const std::string& s) { logging::parse_level(s); }, "LEVEL")),
      row(VOLT_FIELD(profiler), "simple | ops | advanced",
          parsed_by([](const std::string& s) { parse_profiler(s); }, "PROFILER")),
      row(VOLT_FIELD(profiler_dir), "profiler reports (default <log_dir>/profiler)"),
      row(VOLT_FIELD(fast_dev_run), "N: run N batches of every loop, log and save nothing (a smoke test); 0 = off",
          at_least(0)),
      row(VOLT_FIELD(overfit_batches),
          "train and validate on the same first batches (count or fraction), no shuffling; 0 = off", batch_amount()),
      row(VOLT_FIELD(sync_batchnorm), "under DDP: BatchNorm statistics over every process's batch together"),
      row(VOLT_FIELD(reload_dataloaders_every_n_epochs), "new loaders from the data module every N epochs; 0 = once",
          at_least(0)),
      row(VOLT_FIELD(profile_steps), "A:B: profile optimizer steps A to B-1",
          parsed_by([](const std::string& s) { parse_profile_steps(s); }, "A:B")),
      row(VOLT_FIELD(seed), "seed_everything at construction; -1 = none", at_least(-1)),
  };
}

}  // namespace

std::vector<OptionField> trainer_option_table() {
  std::vector<OptionField> table;
  for (auto part : {hardware_rows, loop_rows, behaviour_rows, logging_rows}) {
    std::vector<OptionField> rows = part();
    table.insert(table.end(), std::make_move_iterator(rows.begin()), std::make_move_iterator(rows.end()));
  }
  return table;
}

#undef VOLT_FIELD

OptionField trainer_option(const std::string& name) {
  std::vector<std::string> names;
  for (auto& row : trainer_option_table()) {
    if (row.name == name) return row;
    names.push_back(row.name);
  }
  VOLT_FAIL("trainer_option: '", name, "' is not a TrainerOptions field with a text form; expected one of ",
            join(names, ", "));
}

std::string OptionField::type_name() const {
  return std::visit(
      [](auto access) -> std::string {
        using A = decltype(access);
        if constexpr (std::is_same_v<A, FieldRef<int64_t>> || std::is_same_v<A, FieldRef<int>>) return "INT";
        else if constexpr (std::is_same_v<A, FieldRef<double>>) return "FLOAT";
        else if constexpr (std::is_same_v<A, FieldRef<bool>> || std::is_same_v<A, FieldRef<std::optional<bool>>>)
          return "";
        else return "TEXT";
      },
      access);
}

bool OptionField::is_flag() const {
  return std::holds_alternative<FieldRef<bool>>(access) || std::holds_alternative<FieldRef<std::optional<bool>>>(access);
}

std::string option_text(const OptionField& row, const TrainerOptions& o) {
  auto& m = const_cast<TrainerOptions&>(o);  // the field functions take a mutable object; nothing is written here
  return std::visit(
      [&](auto access) -> std::string {
        using A = decltype(access);
        if constexpr (std::is_same_v<A, TextField>) return access.get(o);
        else {
          const auto& v = access(m);
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, std::string>) return v;
          else if constexpr (std::is_same_v<T, bool>) return v ? "true" : "false";
          else if constexpr (std::is_same_v<T, std::optional<bool>>) return v ? (*v ? "true" : "false") : "";
          else if constexpr (std::is_same_v<T, double>) return real_text(v);
          else if constexpr (std::is_same_v<T, BatchAmount>) return batch_amount_text(v);
          else if constexpr (std::is_same_v<T, std::vector<std::string>>) return join(v, ",");
          else return std::to_string(v);
        }
      },
      row.access);
}

std::string option_problem(const OptionField& row, const std::string& text) {
  if (row.check.run) {
    std::string problem = row.check.run(text);
    if (!problem.empty()) return problem;
  }
  return std::visit(
      [&](auto access) -> std::string {
        using A = decltype(access);
        if constexpr (std::is_same_v<A, FieldRef<int64_t>>) return integer_problem<int64_t>(text);
        else if constexpr (std::is_same_v<A, FieldRef<int>>) return integer_problem<int>(text);
        else if constexpr (std::is_same_v<A, FieldRef<double>>) {
          char* end = nullptr;
          std::strtod(text.c_str(), &end);
          return text.empty() || end != text.c_str() + text.size() ? "expected a number, got '" + text + "'" : "";
        } else if constexpr (std::is_same_v<A, FieldRef<bool>> || std::is_same_v<A, FieldRef<std::optional<bool>>>) {
          if (std::is_same_v<A, FieldRef<std::optional<bool>>> && text.empty()) return "";
          return bool_value(text) ? "" : "expected true or false, got '" + text + "'";
        } else if constexpr (std::is_same_v<A, FieldRef<BatchAmount>>) {
          try {
            parse_batch_amount(text, "");
          } catch (const Error& e) {
            return e.what();
          }
          return "";
        } else {
          return "";
        }
      },
      row.access);
}

void set_option(const OptionField& row, TrainerOptions& o, const std::string& text) {
  const std::string problem = option_problem(row, text);
  VOLT_CHECK(problem.empty(), row.flag, ": ", problem);
  std::visit(
      [&](auto access) {
        using A = decltype(access);
        if constexpr (std::is_same_v<A, TextField>) access.set(o, text);
        else {
          auto& v = access(o);
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, std::string>) v = text;
          else if constexpr (std::is_same_v<T, bool>) v = *bool_value(text);
          else if constexpr (std::is_same_v<T, std::optional<bool>>) v = text.empty() ? std::nullopt : bool_value(text);
          else if constexpr (std::is_same_v<T, double>) v = std::strtod(text.c_str(), nullptr);
          else if constexpr (std::is_same_v<T, BatchAmount>) v = parse_batch_amount(text, row.flag);
          else if constexpr (std::is_same_v<T, std::vector<std::string>>) v = split_names(text);
          else v = static_cast<T>(std::strtoll(text.c_str(), nullptr, 10));
        }
      },
      row.access);
}

}  // namespace volt::cli
