// libFuzzer target: the checkpoint trainer-state reader (parse_trainer_state, trainer/checkpoint/record.h) and the
// sharded layout record (parse_sharded_record, trainer/checkpoint/sharded.h) on arbitrary bytes parsed as JSON.
// nlohmann::json::exception (bad JSON) and volt::Error (a bad record) are the expected rejections; anything else
// (another exception, a sanitizer report, a leak, a hang) is a bug.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include <volt/runtime/error.h>
#include <volt/trainer/checkpoint/record.h>
#include <volt/trainer/checkpoint/sharded.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    const nlohmann::json j = nlohmann::json::parse(bytes);
    if (volt::is_sharded_record(j)) (void)volt::parse_sharded_record(j, "fuzz");  // the sharded layout record
    (void)volt::parse_trainer_state(j, "fuzz");
  } catch (const nlohmann::json::exception&) {
  } catch (const volt::Error&) {
  }
  return 0;
}
