// Check macros for the runtime's CUDA sources: LS_CHECK_CUDA and LS_CHECK_CUBLAS come from
// kernels/cuda/check.h (std::runtime_error without rank prefix; the top-level handler adds it), and
// LS_CHECK_NCCL throws lockstep::Error "[rank r/P host] <call> failed: <reason> (<NCCL's last error
// text>) at file:line (hint: ...)". Only for code of the CUDA build.
#pragma once

#include <nccl.h>

#include "kernels/cuda/check.h"
#include "runtime/base/error.h"

namespace lockstep::detail {

const char* nccl_hint(ncclResult_t rc);
[[noreturn]] void throw_nccl_error(const char* call, ncclResult_t rc, const char* file, int line);

}  // namespace lockstep::detail

#define LS_CHECK_NCCL(call)                                                         \
  do {                                                                              \
    ncclResult_t ls_nccl_rc_ = (call);                                              \
    if (ls_nccl_rc_ != ncclSuccess)                                                 \
      ::lockstep::detail::throw_nccl_error(#call, ls_nccl_rc_, __FILE__, __LINE__); \
  } while (0)
