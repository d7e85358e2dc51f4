#include <volt/trainer/cli/config_file.h>

#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
#include <ios>
#include <memory>

#include <volt/runtime/error.h>

namespace volt::cli {

namespace {

// Option names as config keys: "max_steps" and "max-steps" both reach --max-steps.
std::string flag_name(std::string key) {
  for (char& c : key)
    if (c == '_') c = '-';
  return key;
}

std::string scalar_text(const YAML::Node& n) { return n.IsNull() ? std::string() : n.Scalar(); }

void add_map(const YAML::Node& map, std::vector<CLI::ConfigItem>& items, const std::string& section) {
  for (const auto& kv : map) {
    const std::string where = section.empty() ? std::string("the top level") : "section '" + section + "'";
    if (!kv.first.IsScalar() || kv.first.Scalar().empty())
      throw CLI::ConfigError("--config: a key at " + where + " is empty or not a name; expected option names");
    const std::string key = kv.first.Scalar();
    const YAML::Node& v = kv.second;
    if (v.IsMap()) {
      if (section.empty() && key == "trainer") {
        add_map(v, items, key);
        continue;
      }
      throw CLI::ConfigError("--config: '" + (section.empty() ? key : section + "." + key) +
                             "' is a section; only option values (and a 'trainer:' section) are read");
    }
    CLI::ConfigItem item;
    item.name = flag_name(key);
    if (v.IsSequence()) {
      for (const auto& e : v) {
        if (!e.IsScalar()) throw CLI::ConfigError("--config: '" + key + "' holds a nested value; expected scalars");
        item.inputs.push_back(e.Scalar());
      }
    } else if (v.IsNull()) {
      continue;  // "key:" with no value leaves the default
    } else {
      item.inputs.push_back(scalar_text(v));
    }
    items.push_back(std::move(item));
  }
}

}  // namespace

std::vector<CLI::ConfigItem> YamlConfig::from_config(std::istream& in) const {
  YAML::Node root;
  try {
    root = YAML::Load(in);
  } catch (const YAML::Exception& e) {
    throw CLI::ConfigError("--config: not valid YAML/JSON: " + std::string(e.what()));
  } catch (const std::ios_base::failure& e) {
    // yaml-cpp reads the stream buffer directly, so a read error (a device, a vanished file) arrives as this
    throw CLI::ConfigError("--config: could not read the file: " + std::string(e.what()));
  }
  std::vector<CLI::ConfigItem> items;
  if (root.IsNull()) return items;  // an empty file
  if (!root.IsMap()) throw CLI::ConfigError("--config: expected a mapping of option names to values at the top level");
  add_map(root, items, /*section=*/"");
  return items;
}

std::string YamlConfig::to_config(const CLI::App* app, bool default_also, bool, std::string) const {
  YAML::Emitter out;
  out << YAML::BeginMap;
  for (const CLI::Option* opt : app->get_options()) {
    if (opt->get_lnames().empty() || !opt->get_configurable()) continue;
    const std::string name = opt->get_lnames().front();
    if (name == "help" || name == "config" || name == "print-config") continue;
    const bool flag = opt->get_expected_min() == 0;
    std::vector<std::string> values;
    if (opt->count() > 0) {
      // A flag's value after negation (--no-x) and config input; an option's values as given.
      values = flag ? std::vector<std::string>{opt->as<bool>() ? "true" : "false"} : opt->results();
    } else if (default_also) {
      values = {opt->get_default_str()};
    } else {
      continue;
    }
    std::string key = name;
    for (char& c : key)
      if (c == '-') c = '_';
    out << YAML::Key << key << YAML::Value;
    if (values.size() == 1 && values[0].empty()) {
      out << YAML::Null;  // unset: reading it back keeps the default
    } else if (values.size() == 1) {
      out << values[0];
    } else {
      out << YAML::Flow << YAML::BeginSeq;
      for (const auto& v : values) out << v;
      out << YAML::EndSeq;
    }
  }
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

void add_config_flags(CLI::App& app) {
  app.config_formatter(std::make_shared<YamlConfig>());
  app.set_config("--config", "", "YAML or JSON file of flag values (keys: flag names; the command line wins)")
      ->group("Config");
  const std::string help = "print the effective configuration as YAML (usable with --config) and exit";
  app.add_flag("--print-config", help)->group("Config");
}

bool print_config_requested(const CLI::App& app) { return app.count("--print-config") > 0; }

std::string config_yaml(const CLI::App& app) { return app.config_to_str(/*default_also=*/true, false); }

void check_config_file(const CLI::App& app, int argc, const char* const* argv) {
  std::string file;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--config" && i + 1 < argc) file = argv[i + 1];
    else if (arg.rfind("--config=", 0) == 0) file = arg.substr(9);
  }
  if (file.empty()) return;
  // CLI11 skips a directory given as an optional config file without a word; say so instead (and never hand
  // one to the YAML reader, whose read of it fails inside the stream buffer). found by fuzz_cli
  std::error_code ec;
  if (std::filesystem::is_directory(file, ec)) VOLT_FAIL("--config ", file, ": is a directory; expected a YAML or JSON file");
  std::ifstream in(file);
  if (!in.good()) return;  // the parse reports a missing file
  std::vector<CLI::ConfigItem> items;
  try {
    items = YamlConfig().from_config(in);
  } catch (const CLI::ConfigError&) {
    return;  // reported by the parse
  }
  std::vector<std::string> unknown;
  for (const auto& item : items)
    if (app.get_option_no_throw("--" + item.name) == nullptr) unknown.push_back(item.name);
  if (unknown.empty()) return;
  std::string list;
  for (const auto& u : unknown) list += (list.empty() ? "'" : ", '") + u + "'";
  VOLT_FAIL("--config ", file, ": unknown key", unknown.size() > 1 ? "s " : " ", list,
            " (not a flag of this program; --help lists them, --print-config shows a complete file)");
}

}  // namespace volt::cli
