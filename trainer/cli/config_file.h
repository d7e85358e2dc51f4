#pragma once
/// @file
/// YAML and JSON config files for a CLI11 program (`--config FILE`, `--print-config`), read and written with the
/// flags' own names. Link volt::cli; trainer/cli/trainer_flags.h shows the whole program.
///
/// A config file holds option names as keys, with underscores or dashes, at the top level or under a
/// `trainer:` section (the layout of upstream's CLI config files); a sequence gives a multi-valued flag. Flags
/// on the command line override the file. `--print-config` prints the effective configuration (every flag
/// with its value or default) as YAML that `--config` reads back. Unknown keys, nested sections other than
/// `trainer:`, and values a flag refuses are errors naming the file, the key and the problem.
#include <CLI/CLI.hpp>
#include <istream>
#include <string>
#include <vector>

namespace volt::cli {

/// Reads YAML (and so JSON) config files for CLI11; writes the effective configuration as YAML. Errors are
/// CLI::ConfigError naming the problem ("--config: not valid YAML/JSON: ...").
class YamlConfig : public CLI::Config {
 public:
  std::vector<CLI::ConfigItem> from_config(std::istream& in) const override;
  std::string to_config(const CLI::App* app, bool default_also, bool write_description,
                        std::string prefix) const override;
};

/// --config FILE and --print-config. Call after the program's own options are registered (print-config lists
/// them all). Run check_config_file before app.parse for a clear error on unknown keys.
void add_config_flags(CLI::App& app);

/// Whether --print-config was given (after app.parse).
bool print_config_requested(const CLI::App& app);

/// The configuration in effect after parsing, as YAML.
std::string config_yaml(const CLI::App& app);

/// Before app.parse: reads the file named by --config (if any) and throws volt::Error, naming the file, on a key
/// that is no option of `app` (CLI11 would only say "argument not expected"). Syntax errors are left to the parse.
void check_config_file(const CLI::App& app, int argc, const char* const* argv);

}  // namespace volt::cli
