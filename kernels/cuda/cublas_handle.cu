#include <cuda_runtime_api.h>

#include <vector>

#include "kernels/cuda/check.h"
#include "kernels/cuda/cublas_handle.h"

namespace lockstep::kernels {

cublasHandle_t cublas_handle(cudaStream_t stream) {
  // Indexed by device ordinal; a handle is tied to the device that was current at its creation.
  thread_local std::vector<cublasHandle_t> handles;
  int device = 0;
  LS_CHECK_CUDA(cudaGetDevice(&device));
  if (static_cast<size_t>(device) >= handles.size()) handles.resize(device + 1, nullptr);
  cublasHandle_t& h = handles[device];
  if (h == nullptr) LS_CHECK_CUBLAS(cublasCreate(&h));
  LS_CHECK_CUBLAS(cublasSetStream(h, stream));
  return h;
}

}  // namespace lockstep::kernels
