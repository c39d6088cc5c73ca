// The few CUDA runtime calls that callers without CUDA headers need to drive the CUDA twins
// (tests, benchmarks): device memory on the current device, copies, streams. Failures throw
// std::runtime_error (LS_CHECK_CUDA); in a build without CUDA every function except the frees and
// destroys throws saying so. Thread-safe as the CUDA runtime is.
#pragma once

#include <cstddef>

#include "kernels/cuda_stream.h"

namespace lockstep::kernels {

void* cuda_alloc(size_t bytes);         // cudaMalloc; 0 bytes gives null
void cuda_free(void* device) noexcept;  // errors ignored: called from destructors

// Synchronous copies through the legacy default stream: they wait for work on blocking streams
// (cuda_stream_create makes those), not for work on non-blocking streams.
void cuda_copy_to_device(void* device_dst, const void* host_src, size_t bytes);
void cuda_copy_to_host(void* host_dst, const void* device_src, size_t bytes);
void cuda_zero(void* device, size_t bytes, cudaStream_t stream);  // enqueued on stream

cudaStream_t cuda_stream_create();  // a blocking stream on the current device
void cuda_stream_destroy(cudaStream_t stream) noexcept;
void cuda_stream_synchronize(cudaStream_t stream);

}  // namespace lockstep::kernels
