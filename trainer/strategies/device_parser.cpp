#include <volt/trainer/strategies/device_parser.h>

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <set>

#include <volt/runtime/cuda_api.h>
#include <volt/runtime/error.h>
#include <volt/runtime/text.h>

namespace volt {

namespace {

std::string trim(const std::string& s) { return std::string(detail::trim(s)); }

bool parse_int(const std::string& s, int& out) {
  std::string t = trim(s);
  if (t.empty() || t.size() > 9) return false;
  size_t i = (t[0] == '-' || t[0] == '+') ? 1 : 0;
  if (i == t.size()) return false;
  for (size_t k = i; k < t.size(); ++k)
    if (!std::isdigit(static_cast<unsigned char>(t[k]))) return false;
  out = std::stoi(t);
  return true;
}

std::string resolve_accelerator(const std::string& accelerator, int available_gpus) {
  if (accelerator == "cpu") return "cpu";
  if (accelerator == "gpu" || accelerator == "cuda") return "gpu";
  if (accelerator == "auto" || accelerator.empty()) return available_gpus > 0 ? "gpu" : "cpu";
  VOLT_FAIL("Trainer: accelerator '", accelerator, "' is not supported; expected 'cpu', 'gpu' (or 'cuda') or 'auto'");
}

void check_gpus_present(int available_gpus) {
  VOLT_CHECK(available_gpus > 0, "Trainer: accelerator 'gpu' was requested but no GPU is usable (", cuda_status(),
             "); use accelerator='cpu' or 'auto'");
}

}  // namespace

DeviceSelection parse_devices(const std::string& accelerator, const std::vector<int>& ids, int available_gpus) {
  std::string acc = resolve_accelerator(accelerator, available_gpus);
  VOLT_CHECK(acc == "gpu", "Trainer: a list of device ids selects GPUs, but the accelerator is '", acc, "'");
  check_gpus_present(available_gpus);
  VOLT_CHECK(!ids.empty(), "Trainer: devices=[] selects no GPU; give a count (e.g. 1), ids (e.g. [0, 1]) or -1 for all");
  std::set<int> seen;
  for (int id : ids) {
    VOLT_CHECK(id >= 0, "Trainer: GPU id ", id, " is negative; ids are 0..", available_gpus - 1,
               " (use -1 alone for all GPUs)");
    VOLT_CHECK(id < available_gpus, "Trainer: GPU id ", id, " does not exist; ", available_gpus,
               " GPU(s) are visible (ids 0..", available_gpus - 1, ")");
    VOLT_CHECK(seen.insert(id).second, "Trainer: GPU id ", id, " is listed twice in devices");
  }
  DeviceSelection sel;
  sel.accelerator = "gpu";
  sel.device_ids = ids;
  sel.num_processes = static_cast<int>(ids.size());
  return sel;
}

DeviceSelection parse_devices(const std::string& accelerator, const std::string& devices_in, int available_gpus) {
  std::string acc = resolve_accelerator(accelerator, available_gpus);
  std::string devices = trim(devices_in);
  // "[0]" / "[1, 3]": a list of ids, even with a single element.
  const bool bracketed = devices.size() >= 2 && devices.front() == '[' && devices.back() == ']';
  if (bracketed) devices = trim(devices.substr(1, devices.size() - 2));
  const bool is_auto = devices == "auto";
  DeviceSelection sel;
  sel.accelerator = acc;
  if (acc == "cpu") {
    int n = 1;
    if (devices != "auto") {
      VOLT_CHECK(parse_int(devices, n) && n > 0 && devices.find(',') == std::string::npos,
                 "Trainer: devices='", devices_in, "' is invalid for the CPU accelerator; expected a positive number "
                 "of processes (e.g. '2') or 'auto'");
    }
    sel.num_processes = n;
    sel.devices_auto = is_auto;
    for (int i = 0; i < n; ++i) sel.device_ids.push_back(i);
    return sel;
  }
  check_gpus_present(available_gpus);
  if (is_auto) {
    DeviceSelection all = parse_devices("gpu", "-1", available_gpus);
    all.devices_auto = true;
    return all;
  }
  if (bracketed && devices.empty()) return parse_devices("gpu", std::vector<int>{}, available_gpus);
  if (bracketed || devices.find(',') != std::string::npos) {
    std::vector<int> ids;
    size_t start = 0;
    while (start <= devices.size()) {
      size_t end = devices.find(',', start);
      std::string part = trim(devices.substr(start, end == std::string::npos ? std::string::npos : end - start));
      if (!part.empty() || end != std::string::npos) {
        int v = 0;
        if (!part.empty()) {
          VOLT_CHECK(parse_int(part, v), "Trainer: devices='", devices_in, "': '", part, "' is not an integer GPU id");
          ids.push_back(v);
        } else if (end != std::string::npos && end + 1 < devices.size()) {
          VOLT_FAIL("Trainer: devices='", devices_in, "' has an empty id between commas");
        }
      }
      if (end == std::string::npos) break;
      start = end + 1;
    }
    return parse_devices("gpu", ids, available_gpus);
  }
  int k = 0;
  VOLT_CHECK(parse_int(devices, k), "Trainer: devices='", devices_in, "' is not understood; expected a count like '2', "
             "ids like '1, 3' or '2,', '-1' for all GPUs, or 'auto'");
  if (k == -1) {
    std::vector<int> all(static_cast<size_t>(available_gpus));
    for (int i = 0; i < available_gpus; ++i) all[i] = i;
    return parse_devices("gpu", all, available_gpus);
  }
  VOLT_CHECK(k > 0, "Trainer: devices=", k, " is invalid: use a positive count of GPUs, -1 for all, or ids like '1, 3'",
             k == 0 ? " (0 GPUs would train nothing; use accelerator='cpu' for the CPU)" : "");
  VOLT_CHECK(k <= available_gpus, "Trainer: devices=", k, " asks for ", k, " GPUs but only ", available_gpus,
             " are visible");
  std::vector<int> first(static_cast<size_t>(k));
  for (int i = 0; i < k; ++i) first[i] = i;
  return parse_devices("gpu", first, available_gpus);
}

DeviceSelection parse_devices(const std::string& accelerator, const std::string& devices) {
  return parse_devices(accelerator, devices, cuda_device_count());
}

std::vector<int> pick_free_gpus(int k) {
  VOLT_CHECK(k > 0, "pick_free_gpus: k must be positive, got ", k);
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_LAZY | RTLD_LOCAL);
  VOLT_CHECK(lib != nullptr, "pick_free_gpus: NVML (libnvidia-ml.so.1, part of the NVIDIA driver) is not available, "
             "so busy GPUs cannot be detected; pass explicit ids in devices instead");
  using InitFn = int (*)();
  using CountFn = int (*)(unsigned*);
  using HandleFn = int (*)(unsigned, void**);
  using ProcsFn = int (*)(void*, unsigned*, void*);
  auto init = reinterpret_cast<InitFn>(dlsym(lib, "nvmlInit_v2"));
  auto count = reinterpret_cast<CountFn>(dlsym(lib, "nvmlDeviceGetCount_v2"));
  auto handle = reinterpret_cast<HandleFn>(dlsym(lib, "nvmlDeviceGetHandleByIndex_v2"));
  auto procs = reinterpret_cast<ProcsFn>(dlsym(lib, "nvmlDeviceGetComputeRunningProcesses"));
  std::vector<int> free_ids;
  unsigned n = 0;
  if (init && count && handle && procs && init() == 0 && count(&n) == 0) {
    for (unsigned i = 0; i < n && static_cast<int>(free_ids.size()) < k; ++i) {
      void* h = nullptr;
      unsigned nprocs = 0;
      // With a zero-sized buffer NVML reports the number of running compute processes (0 = idle: success).
      if (handle(i, &h) == 0 && procs(h, &nprocs, nullptr) == 0 && nprocs == 0) free_ids.push_back(static_cast<int>(i));
    }
  }
  dlclose(lib);
  VOLT_CHECK(static_cast<int>(free_ids.size()) == k, "pick_free_gpus: asked for ", k, " idle GPU(s) but found ",
             free_ids.size(), " (of ", n, ")");
  return free_ids;
}

}  // namespace volt
