// Check macros for CUDA runtime and cuBLAS calls, used by the CUDA twins (*.cu) and by any code
// that includes the CUDA headers itself. A failed call throws std::runtime_error carrying
// "<call> failed: <name>: <reason> at file:line (hint: ...)". Kernels know nothing of ranks: the
// top-level handler that catches the error adds the rank prefix. Stateless and thread-safe.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

namespace lockstep::kernels::detail {

[[noreturn]] void throw_cuda_error(const char* call, cudaError_t code, const char* file, int line);
[[noreturn]] void throw_cublas_error(const char* call, cublasStatus_t code, const char* file,
                                     int line);

}  // namespace lockstep::kernels::detail

#define LS_CHECK_CUDA(call)                                                                  \
  do {                                                                                       \
    const cudaError_t ls_cuda_rc_ = (call);                                                  \
    if (ls_cuda_rc_ != cudaSuccess)                                                          \
      ::lockstep::kernels::detail::throw_cuda_error(#call, ls_cuda_rc_, __FILE__, __LINE__); \
  } while (0)

#define LS_CHECK_CUBLAS(call)                                                                    \
  do {                                                                                           \
    const cublasStatus_t ls_cublas_rc_ = (call);                                                 \
    if (ls_cublas_rc_ != CUBLAS_STATUS_SUCCESS)                                                  \
      ::lockstep::kernels::detail::throw_cublas_error(#call, ls_cublas_rc_, __FILE__, __LINE__); \
  } while (0)

// After a <<<...>>> launch, so that a bad launch configuration is reported at its launcher rather
// than at the next synchronisation. `kernel` names the kernel in the message.
#define LS_CHECK_LAUNCH(kernel)                                                                   \
  do {                                                                                            \
    const cudaError_t ls_launch_rc_ = cudaGetLastError();                                         \
    if (ls_launch_rc_ != cudaSuccess)                                                             \
      ::lockstep::kernels::detail::throw_cuda_error("launch of " kernel, ls_launch_rc_, __FILE__, \
                                                    __LINE__);                                    \
  } while (0)
