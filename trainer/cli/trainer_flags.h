#pragma once
/// @file
/// Every TrainerOptions field with a text form as a command-line flag, for programs built on CLI11 (the examples
/// use it; so can a user's own training program). The flags are generated from the option table
/// (trainer/cli/option_table.h), so an option added there needs no edit here. Link volt::cli.
/// @code
///   CLI::App app{"my trainer"};
///   volt::TrainerOptions opt;
///   volt::cli::add_trainer_flags(app, opt);   // --max-steps, --limit-train-batches, --gradient-clip-val, ...
///   volt::cli::add_config_flags(app);         // --config FILE (YAML or JSON), --print-config (config_file.h)
///   volt::cli::check_config_file(app, argc, argv);  // unknown keys in the file: an error naming them
///   app.parse(argc, argv);
///   if (volt::cli::print_config_requested(app)) { std::cout << volt::cli::config_yaml(app); return 0; }
/// @endcode
/// Flags are the option names with dashes (`max_steps` -> `--max-steps`, `grad_scaler.init_scale` ->
/// `--grad-scaler-init-scale`); `--help` shows each with its default, in the group "Trainer". Values are checked
/// as they are parsed, with messages naming the flag ("--max-steps: must be >= -1, got -2"). `--strategy`
/// accepts every name in the strategy registry (trainer/strategies/registry.h) when the command line is parsed,
/// a program's own strategies included.
#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

#include <volt/trainer/trainer_options.h>

namespace volt::cli {

/// Registers a flag for every row of trainer_option_table() but those `skip` names (field names, e.g.
/// {"max_epochs", "default_root_dir"}: the program has flags of its own for them). The flags write into `o`,
/// which must outlive `app`; their defaults are `o`'s values when this is called.
void add_trainer_flags(CLI::App& app, TrainerOptions& o, const std::vector<std::string>& skip = {});

/// A boolean flag ("--x,!--no-x") whose default --print-config shows; "--x=false" and config values work too.
CLI::Option* add_bool_flag(CLI::App& app, const std::string& names, bool& target, const std::string& help);

/// A boolean flag for a std::optional<bool>: absent leaves it unset (--print-config writes null, which reads back
/// as unset); "--x", "--x=true" or a config value true sets true, "--no-x" or false sets false; the last one
/// given wins. A value that is no boolean is a parse error naming the flag.
CLI::Option* add_optional_bool_flag(CLI::App& app, const std::string& names, std::optional<bool>& target,
                                    const std::string& help);

}  // namespace volt::cli
