#include <volt/trainer/cli/trainer_flags.h>

#include <algorithm>
#include <memory>

#include <volt/trainer/cli/option_table.h>

namespace volt::cli {

namespace {

// A flag that takes a value: the row's check (and conversion) runs as CLI11's validator, so a bad value is a
// CLI::ValidationError "<flag>: <problem>" and the callback only ever sees text it can set.
CLI::Option* add_valued(CLI::App& app, const OptionField& field, TrainerOptions& o) {
  auto row = std::make_shared<const OptionField>(field);
  return app
      .add_option_function<std::string>(
          row->flag, [row, &o](const std::string& s) { set_option(*row, o, s); }, row->help)
      ->type_name(row->type_name())
      ->check(CLI::Validator([row](std::string& s) { return option_problem(*row, s); }, row->check.description))
      ->default_str(option_text(*row, o));
}

}  // namespace

CLI::Option* add_bool_flag(CLI::App& app, const std::string& names, bool& target, const std::string& help) {
  return app.add_flag(names, target, help)->default_str(target ? "true" : "false");
}

CLI::Option* add_optional_bool_flag(CLI::App& app, const std::string& names, std::optional<bool>& target,
                                    const std::string& help) {
  // The check runs before the callback and turns a value that is no boolean into a parse error (the flag
  // callback's own conversion would throw std::invalid_argument out of parse).
  const CLI::Validator boolean(
      [](std::string& s) -> std::string {
        try {
          CLI::detail::to_flag_value(s);
        } catch (const std::exception&) {
          return "expected true or false, got '" + s + "'";
        }
        return "";
      },
      "BOOL");
  return app.add_flag_function(names, [&target](int64_t count) { target = count > 0; }, help)
      ->check(boolean)
      ->default_str(target ? (*target ? "true" : "false") : "")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
}

void add_trainer_flags(CLI::App& app, TrainerOptions& o, const std::vector<std::string>& skip) {
  for (const OptionField& row : trainer_option_table()) {
    if (std::find(skip.begin(), skip.end(), row.name) != skip.end()) continue;
    const std::string names = row.negation.empty() ? row.flag : row.flag + ",!" + row.negation;
    CLI::Option* opt = nullptr;
    if (auto* ref = std::get_if<FieldRef<bool>>(&row.access)) opt = add_bool_flag(app, names, (*ref)(o), row.help);
    else if (auto* opt_ref = std::get_if<FieldRef<std::optional<bool>>>(&row.access))
      opt = add_optional_bool_flag(app, names, (*opt_ref)(o), row.help);
    else
      opt = add_valued(app, row, o);
    opt->group("Trainer");
  }
}

}  // namespace volt::cli
