// The few CUDA runtime calls that callers without CUDA headers need to drive the CUDA twins
// (tests, benchmarks): device memory on the current device, copies, streams. Failures throw
// std::runtime_error (LS_CHECK_CUDA); in a build without CUDA every function except the frees and
// destroys throws saying so. Thread-safe as the CUDA runtime is.
// No collective calls.
#pragma once

#include <cstddef>
#include <string>

#include "kernels/cuda/stream.h"

struct CUevent_st;
using cudaEvent_t = CUevent_st*;
struct CUgraphExec_st;
using cudaGraphExec_t = CUgraphExec_st*;

namespace lockstep::kernels {

void* cuda_alloc(size_t bytes);         // cudaMalloc; 0 bytes gives null
void cuda_free(void* device) noexcept;  // errors ignored: called from destructors
// Bytes cuda_alloc holds now, and the most it has held at once since the process started (or the
// last reset): every buffer and workspace Lockstep allocates goes through it; what libraries
// allocate themselves (cuBLAS's and NCCL's internals, the CUDA context) is not counted, as
// PyTorch's max_memory_allocated counts its allocator's blocks only. 0 without CUDA.
size_t cuda_allocated_bytes();
size_t cuda_peak_allocated_bytes();
void cuda_reset_peak_allocated();

// Synchronous copies through the legacy default stream: they wait for work on blocking streams
// (cuda_stream_create makes those), not for work on non-blocking streams.
void cuda_copy_to_device(void* device_dst, const void* host_src, size_t bytes);
void cuda_copy_to_host(void* host_dst, const void* device_src, size_t bytes);
void cuda_zero(void* device, size_t bytes, cudaStream_t stream);  // enqueued on stream

cudaStream_t cuda_stream_create();  // a blocking stream on the current device
void cuda_stream_destroy(cudaStream_t stream) noexcept;
void cuda_stream_synchronize(cudaStream_t stream);

// Page-locked host memory (cudaMallocHost): copies from it run asynchronously on a stream, so a
// copy stream can bring the next batch while the compute stream works. 0 bytes gives null.
void* cuda_host_alloc(size_t bytes);
void cuda_host_free(void* host) noexcept;
// Enqueued on `stream`; the host side must be page-locked for the copy to overlap other work.
void cuda_copy_to_device_async(void* device_dst, const void* host_src, size_t bytes,
                               cudaStream_t stream);
void cuda_copy_to_host_async(void* host_dst, const void* device_src, size_t bytes,
                             cudaStream_t stream);
// Device to device, enqueued on `stream`.
void cuda_copy_on_device_async(void* device_dst, const void* device_src, size_t bytes,
                               cudaStream_t stream);

// Events order one stream after work queued on another without blocking the host (a batch copied
// on the copy stream before the compute stream reads it). Created without timing.
cudaEvent_t cuda_event_create();
void cuda_event_destroy(cudaEvent_t event) noexcept;
void cuda_event_record(cudaEvent_t event, cudaStream_t stream);
void cuda_stream_wait_event(cudaStream_t stream, cudaEvent_t event);
void cuda_event_synchronize(cudaEvent_t event);
// An event that records a time stamp (benchmarks), and the milliseconds between two of them once
// both have completed (after cuda_event_synchronize on `stop`).
cudaEvent_t cuda_timing_event_create();
float cuda_event_elapsed_ms(cudaEvent_t start, cudaEvent_t stop);

// CUDA graphs of one stream's work (the training step, runtime/train/device_step.cpp). Capture is
// in relaxed mode: other threads and streams may go on meanwhile. cuda_capture_end returns the
// instantiated graph, or null with the reason in *why when the capture or the instantiation failed
// (the capture is then discarded and the stream captures no more); cuda_capture_discard ends a
// capture, if one is active, dropping what it recorded and the error that broke it.
void cuda_capture_begin(cudaStream_t stream);
cudaGraphExec_t cuda_capture_end(cudaStream_t stream, std::string* why);
void cuda_capture_discard(cudaStream_t stream) noexcept;
void cuda_graph_launch(cudaGraphExec_t graph, cudaStream_t stream);
void cuda_graph_destroy(cudaGraphExec_t graph) noexcept;

}  // namespace lockstep::kernels
