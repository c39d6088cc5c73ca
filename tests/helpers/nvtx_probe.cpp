// A stand-in for a profiler's NVTX injection library (what Nsight Systems loads through
// NVTX_INJECTION64_PATH), for tests: it takes over NVTX's core callbacks and writes every range
// push and pop, thread name and category name to $LOCKSTEP_NVTX_PROBE_OUT.<pid>, a line each:
//   push <os tid> <category id> <name>
//   pop <os tid>
//   thread <os tid> <name>
//   category <id> <name>
// so a test can check which ranges a real profiler would see, and that they nest.
#include <nvtx3/nvToolsExt.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

namespace {

std::mutex out_mutex;
FILE* out = nullptr;

void record(const std::string& line) {
  std::lock_guard<std::mutex> lock(out_mutex);
  if (out == nullptr) {
    const char* base = std::getenv("LOCKSTEP_NVTX_PROBE_OUT");
    const std::string path =
        std::string(base ? base : "nvtx-probe") + "." + std::to_string(getpid());
    out = std::fopen(path.c_str(), "a");
    if (out == nullptr) return;
  }
  std::fputs((line + "\n").c_str(), out);
  std::fflush(out);  // ranks may leave through MPI_Abort: keep what was seen
}

std::string tid() { return std::to_string(syscall(SYS_gettid)); }

int push_ex(const nvtxEventAttributes_t* a) {
  const char* name = a->messageType == NVTX_MESSAGE_TYPE_ASCII ? a->message.ascii : "?";
  record("push " + tid() + " " + std::to_string(a->category) + " " + name);
  return 0;
}

int push_a(const char* name) {
  record("push " + tid() + " 0 " + name);
  return 0;
}

int pop() {
  record("pop " + tid());
  return 0;
}

void name_thread(uint32_t os_tid, const char* name) {
  record("thread " + std::to_string(os_tid) + " " + name);
}

void name_category(uint32_t id, const char* name) {
  record("category " + std::to_string(id) + " " + name);
}

template <typename F>
void install(NvtxFunctionTable table, unsigned size, unsigned id, F* fn) {
  if (id < size && table[id] != nullptr) *table[id] = reinterpret_cast<NvtxFunctionPointer>(fn);
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjectionNvtx2(
    NvtxGetExportTableFunc_t get_export_table) {
  const auto* callbacks =
      static_cast<const NvtxExportTableCallbacks*>(get_export_table(NVTX_ETID_CALLBACKS));
  if (callbacks == nullptr) return 0;
  NvtxFunctionTable table = nullptr;
  unsigned size = 0;
  if (!callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &table, &size) || table == nullptr)
    return 0;
  install(table, size, NVTX_CBID_CORE_RangePushEx, push_ex);
  install(table, size, NVTX_CBID_CORE_RangePushA, push_a);
  install(table, size, NVTX_CBID_CORE_RangePop, pop);
  install(table, size, NVTX_CBID_CORE_NameOsThreadA, name_thread);
  install(table, size, NVTX_CBID_CORE_NameCategoryA, name_category);
  return 1;
}
