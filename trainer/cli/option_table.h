#pragma once
/// @file
/// TrainerOptions as a table: one row per field that has a text form (not callbacks or loggers, which are
/// objects). The command line (trainer/cli/trainer_flags.h) and config files (trainer/cli/config_file.h) are
/// generated from it, so a Trainer option is written once: its field in trainer_options.h and its row in
/// option_table.cpp (name, help, how it is read and written, how its text is checked). Nothing here needs CLI11.
/// @code
///   volt::TrainerOptions o;
///   for (const auto& row : volt::cli::trainer_option_table())
///     std::cout << row.flag << " = " << volt::cli::option_text(row, o) << "  # " << row.help << "\n";
///   volt::cli::set_option(volt::cli::trainer_option("max_steps"), o, "100");   // o.max_steps == 100
/// @endcode
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <volt/trainer/trainer_options.h>

namespace volt::cli {

/// Where a row's value lives: a function giving the field of a TrainerOptions (`o.max_steps`,
/// `o.grad_scaler.init_scale`).
template <class T>
using FieldRef = T& (*)(TrainerOptions&);

/// A field whose text is not the value's own spelling (an enum): how to read it from and write it to text. `set` is called only with text the row's check accepted.
struct TextField {
  void (*set)(TrainerOptions&, const std::string&);
  std::string (*get)(const TrainerOptions&);
};

/// The ways a row reaches its field. A BatchAmount reads "10" as 10 batches and "0.25" as a fraction of the epoch;
/// a list of names is written comma-separated ("encoder,decoder.l1").
using OptionAccess = std::variant<FieldRef<std::string>, FieldRef<int64_t>, FieldRef<int>, FieldRef<double>,
                                  FieldRef<bool>, FieldRef<std::optional<bool>>, FieldRef<BatchAmount>,
                                  FieldRef<std::vector<std::string>>, TextField>;

/// How a row's text is checked before it is converted.
struct OptionCheck {
  std::string description;  ///< shown in --help after the type ("INT:>= 1", "TEXT:COUNT|FRACTION"); may be empty
  /// "" when `text` is acceptable, else the problem ("must be >= 1, got 0"); empty function: any text.
  std::function<std::string(const std::string&)> run;
};

struct OptionField {
  std::string name;      ///< the field's path in TrainerOptions: "max_steps", "grad_scaler.init_scale"
  std::string flag;      ///< "--" + name with '_' and '.' as '-': "--max-steps", "--grad-scaler-init-scale"
  std::string negation;  ///< a boolean's "off" flag ("--no-progress-bar"), or ""
  std::string help;      ///< one line for --help
  OptionAccess access;
  OptionCheck check;
  /// The type CLI11 shows in --help: "INT", "FLOAT", "TEXT"; "" for booleans (flags).
  std::string type_name() const;
  bool is_flag() const;  ///< a bool or std::optional<bool> field: a flag that takes no value
};

/// Every row, in the order --help lists them. Built on each call, so that the strategy row names the strategies
/// registered by then (trainer/strategies/registry.h): a program's own strategy needs no edit here.
std::vector<OptionField> trainer_option_table();

/// The row of `name` ("max_steps"). volt::Error for a name the table does not have.
OptionField trainer_option(const std::string& name);

/// The row's value in `o` as text, as a config file or --print-config writes it: integers and "true"/"false" as
/// usual, reals as an ostream prints them ("65536", "0.5"), a BatchAmount fraction with a point ("1.0"), enums by
/// name, lists comma-separated; "" for an empty string or an unset optional.
std::string option_text(const OptionField& row, const TrainerOptions& o);

/// The problem with `text` for this row ("" if none): the row's check, then the conversion (an integer that does
/// not fit the field, a boolean other than true/false/1/0/yes/no/on/off).
std::string option_problem(const OptionField& row, const std::string& text);

/// Sets the row's field of `o` from `text`. volt::Error "<flag>: <problem>" when option_problem finds one.
/// A boolean takes true/false (1/0, yes/no, on/off); an optional boolean also "" (unset).
void set_option(const OptionField& row, TrainerOptions& o, const std::string& text);

/// "10" -> 10 batches; "0.25" / "1.0" / "1e-1" -> a fraction of the epoch. `flag` names the option in errors.
BatchAmount parse_batch_amount(const std::string& s, const std::string& flag);

}  // namespace volt::cli
