// Check macros for the runtime's CUDA sources: LS_CHECK_CUDA and LS_CHECK_CUBLAS come from
// kernels/cuda_check.h (std::runtime_error without rank prefix; the top-level handler adds it), and
// LS_CHECK_NCCL throws lockstep::Error "[rank r/P host] <call> failed: <reason> (<NCCL's last error
// text>) at file:line (hint: ...)". Only for code of the CUDA build.
//
// Also the one piece of CUDA state the runtime's .cu files share: CUDA's current device is per
// thread, so helper threads (the MPI progress thread staging device buffers, a loader thread)
// call use_active_device() before touching device memory, to work on the GPU that
// activate_device() chose rather than silently opening a context on GPU 0.
#pragma once

#include <nccl.h>

#include "kernels/cuda_check.h"
#include "runtime/error.h"

namespace lockstep::detail {

const char* nccl_hint(ncclResult_t rc);
[[noreturn]] void throw_nccl_error(const char* call, ncclResult_t rc, const char* file, int line);

// Makes the device of the last activate_device() current on the calling thread, if it is not
// already; no-op before any activate_device().
void use_active_device();

}  // namespace lockstep::detail

#define LS_CHECK_NCCL(call)                                                                    \
  do {                                                                                         \
    ncclResult_t ls_nccl_rc_ = (call);                                                         \
    if (ls_nccl_rc_ != ncclSuccess)                                                            \
      ::lockstep::detail::throw_nccl_error(#call, ls_nccl_rc_, __FILE__, __LINE__);            \
  } while (0)
