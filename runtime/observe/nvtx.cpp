#include "runtime/observe/nvtx.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#if LOCKSTEP_HAVE_NVTX
#include <nvtx3/nvToolsExt.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace lockstep {

#if LOCKSTEP_HAVE_NVTX

namespace {

// A few well-separated colours (ARGB), one per category in order of first use.
constexpr uint32_t kColours[] = {0xFF4E79A7, 0xFFF28E2B, 0xFFE15759, 0xFF76B7B2, 0xFF59A14F,
                                 0xFFEDC948, 0xFFB07AA1, 0xFFFF9DA7, 0xFF9C755F, 0xFFBAB0AC};

// NVTX category ids (1, 2, ...) by name, registered with nvtxNameCategoryA on first use. The
// categories are the tracer's literals, so the list stays short and a linear search is enough.
uint32_t category_id(const char* category) {
  static std::mutex mutex;
  static std::vector<std::string> names;
  std::lock_guard<std::mutex> lock(mutex);
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == category) return static_cast<uint32_t>(i + 1);
  names.emplace_back(category);
  const auto id = static_cast<uint32_t>(names.size());
  nvtxNameCategoryA(id, category);
  return id;
}

}  // namespace

bool nvtx_enabled() {
  static const bool on = [] {
    const char* path = std::getenv("NVTX_INJECTION64_PATH");
    return path != nullptr && *path != '\0';
  }();
  return on;
}

void nvtx_push(const char* name, const char* category) {
  const uint32_t id = category_id(category);
  nvtxEventAttributes_t a;
  std::memset(&a, 0, sizeof a);
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.category = id;
  a.colorType = NVTX_COLOR_ARGB;
  a.color = kColours[(id - 1) % (sizeof kColours / sizeof kColours[0])];
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = name;
  nvtxRangePushEx(&a);
}

void nvtx_pop() { nvtxRangePop(); }

void nvtx_name_thread(const char* name) {
  if (nvtx_enabled()) nvtxNameOsThreadA(static_cast<uint32_t>(syscall(SYS_gettid)), name);
}

#else  // built without the nvtx3 headers: nothing to emit

bool nvtx_enabled() { return false; }
void nvtx_push(const char*, const char*) {}
void nvtx_pop() {}
void nvtx_name_thread(const char*) {}

#endif

}  // namespace lockstep
