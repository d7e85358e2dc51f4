// libFuzzer target: the examples' YAML/JSON config files (trainer/cli/config_file.h, cli::YamlConfig). Any input
// either gives config items or a CLI::ConfigError naming the problem; nothing else may escape, and every item
// read has a name.
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>

#include <volt/trainer/cli/config_file.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  try {
    const auto items = volt::cli::YamlConfig().from_config(in);
    for (const auto& item : items)
      if (item.name.empty() && item.inputs.empty()) std::abort();
  } catch (const CLI::ConfigError&) {
  }
  return 0;
}
