// Plain copies between host and CUDA device memory, for code that stages device buffers through
// the host (the MPI backend with device buffers). Synchronous. In a build without CUDA these throw
// Error saying that CUDA was not built.
#pragma once

#include <cstddef>

namespace lockstep {

bool cuda_built();
void copy_device_to_host(void* host_dst, const void* device_src, size_t bytes);
void copy_host_to_device(void* device_dst, const void* host_src, size_t bytes);

// Device memory on the current CUDA device (cudaMalloc/cudaFree), for code outside the kernels
// that needs a device buffer of its own (the collective benchmark). device_alloc(0) may return
// null; device_free(nullptr) does nothing.
void* device_alloc(size_t bytes);
void device_free(void* device_ptr);

}  // namespace lockstep
