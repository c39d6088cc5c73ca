// Stands in for device_copy.cu when CUDA is not built.
#include "runtime/device_copy.h"

#include "runtime/error.h"

namespace lockstep {

namespace {
[[noreturn]] void not_built() {
  throw Error(rank_prefix() + " device buffers need the CUDA build (configure with LOCKSTEP_CUDA=ON)");
}
}  // namespace

bool cuda_built() { return false; }
void copy_device_to_host(void*, const void*, size_t) { not_built(); }
void copy_host_to_device(void*, const void*, size_t) { not_built(); }
void* device_alloc(size_t) { not_built(); }
void device_free(void* device_ptr) {
  if (device_ptr != nullptr) not_built();
}

}  // namespace lockstep
