// A minimal NVTX tool for the tests: loaded by NVTX through NVTX_INJECTION64_PATH (as Nsight's own injection
// library is), it records every domain range push/pop and mark as text, which tests/nvtx/test_nvtx.cpp reads
// through volt_nvtx_stub_events().
#include <mutex>
#include <string>
#include <vector>

#include <nvtx3/nvToolsExt.h>

namespace {

struct StubDomain {
  std::string name;
};

std::mutex g_mu;
std::vector<std::string> g_events;

std::string domain_name(nvtxDomainHandle_t d) {
  return d ? reinterpret_cast<StubDomain*>(d)->name : std::string("<default>");
}

std::string message(const nvtxEventAttributes_t* a) {
  if (!a) return "";
  std::string m = a->messageType == NVTX_MESSAGE_TYPE_ASCII && a->message.ascii ? a->message.ascii : "";
  if (a->payloadType == NVTX_PAYLOAD_TYPE_UNSIGNED_INT64) m += " bytes=" + std::to_string(a->payload.ullValue);
  return m;
}

void record(std::string e) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_events.push_back(std::move(e));
}

nvtxDomainHandle_t NVTX_API domain_create(const char* name) {
  return reinterpret_cast<nvtxDomainHandle_t>(new StubDomain{name ? name : ""});
}
int NVTX_API domain_push(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  record("push " + domain_name(d) + " " + message(a));
  return 0;
}
int NVTX_API domain_pop(nvtxDomainHandle_t d) {
  record("pop " + domain_name(d));
  return 0;
}
void NVTX_API domain_mark(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  record("mark " + domain_name(d) + " " + message(a));
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_export_table) {
  auto* callbacks = static_cast<const NvtxExportTableCallbacks*>(get_export_table(NVTX_ETID_CALLBACKS));
  if (!callbacks) return 0;
  NvtxFunctionTable table = nullptr;
  unsigned int size = 0;
  if (!callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &table, &size) || !table) return 0;
  auto set = [&](unsigned int id, NvtxFunctionPointer fn) {
    if (id < size && table[id]) *table[id] = fn;
  };
  set(NVTX_CBID_CORE2_DomainCreateA, reinterpret_cast<NvtxFunctionPointer>(&domain_create));
  set(NVTX_CBID_CORE2_DomainRangePushEx, reinterpret_cast<NvtxFunctionPointer>(&domain_push));
  set(NVTX_CBID_CORE2_DomainRangePop, reinterpret_cast<NvtxFunctionPointer>(&domain_pop));
  set(NVTX_CBID_CORE2_DomainMarkEx, reinterpret_cast<NvtxFunctionPointer>(&domain_mark));
  return 1;
}

// Moves the events recorded so far ("push <domain> <message>", "pop <domain>", "mark <domain> <message>") into
// `out`.
__attribute__((visibility("default"))) void volt_nvtx_stub_take(std::vector<std::string>* out) {
  std::lock_guard<std::mutex> lock(g_mu);
  out->clear();
  out->swap(g_events);
}

}  // extern "C"
