// CUDA twin of device_copy_stub.cpp. The copies go through the legacy default stream, which orders
// them after the work of every blocking stream (the NCCL stream, kernels::cuda_stream_create's), so
// a staged buffer is read only after the kernels that wrote it.
#include <cuda_runtime_api.h>

#include "runtime/cuda_check.h"
#include "runtime/device_copy.h"

namespace lockstep {

bool cuda_built() { return true; }

void copy_device_to_host(void* host_dst, const void* device_src, size_t bytes) {
  if (bytes == 0) return;
  detail::use_active_device();  // the MPI backend calls this from its progress thread
  LS_CHECK_CUDA(cudaMemcpy(host_dst, device_src, bytes, cudaMemcpyDeviceToHost));
}

void copy_host_to_device(void* device_dst, const void* host_src, size_t bytes) {
  if (bytes == 0) return;
  detail::use_active_device();
  LS_CHECK_CUDA(cudaMemcpy(device_dst, host_src, bytes, cudaMemcpyHostToDevice));
}

void* device_alloc(size_t bytes) {
  detail::use_active_device();
  // Never a zero-byte cudaMalloc: callers get a distinct pointer even for empty buffers.
  void* ptr = nullptr;
  LS_CHECK_CUDA(cudaMalloc(&ptr, bytes > 0 ? bytes : 1));
  return ptr;
}

void device_free(void* device_ptr) {
  // Never throws (destructors call it); a lost context reports itself on the next checked call.
  if (device_ptr != nullptr) cudaFree(device_ptr);
}

}  // namespace lockstep
