// An outside project's command line through volt::cli (installed headers only): the Trainer's flags and a YAML
// config file generated from the option table, and a strategy the program registers accepted by --strategy.
// Prints a line that tests/consumer/run_consumer.cmake checks.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <volt/trainer/cli/config_file.h>
#include <volt/trainer/cli/option_table.h>
#include <volt/trainer/cli/trainer_flags.h>
#include <volt/trainer/strategies/registry.h>

int main() {
  volt::register_strategy("consumer_cli", {.make = [](const volt::StrategyOptions& o) {
                                             return volt::make_strategy("single_device", o.devices);
                                           }});
  const auto file = std::filesystem::temp_directory_path() / "volt_consumer_cli.yaml";
  std::ofstream(file) << "trainer:\n  limit_train_batches: 0.5\n  max_steps: 9\n";
  CLI::App app{"volt consumer cli"};
  volt::TrainerOptions o;
  volt::cli::add_trainer_flags(app, o);
  volt::cli::add_config_flags(app);
  const std::string path = file.string();
  std::vector<const char*> argv = {"prog", "--config", path.c_str(), "--max-steps", "5", "--strategy", "consumer_cli"};
  try {
    volt::cli::check_config_file(app, static_cast<int>(argv.size()), argv.data());
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    std::printf("volt-consumer-cli: parse error: %s\n", e.what());
    return 1;
  }
  std::filesystem::remove(file);
  const bool ok = o.max_steps == 5 && o.limit_train_batches.is_fraction && o.limit_train_batches.fraction == 0.5 &&
                  o.strategy == "consumer_cli" && volt::cli::trainer_option_table().size() > 40;
  std::printf("volt-consumer-cli: max_steps=%lld limit_train_batches=%s strategy=%s\n",
              static_cast<long long>(o.max_steps),
              volt::cli::option_text(volt::cli::trainer_option("limit_train_batches"), o).c_str(), o.strategy.c_str());
  std::printf("volt-consumer-cli: %s\n", ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
