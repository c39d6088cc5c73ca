#include <cuda_runtime.h>

#include <algorithm>
#include <mutex>
#include <unordered_map>

#include "kernels/cuda/check.h"
#include "kernels/cuda/memory.h"

namespace lockstep::kernels {

namespace {

// What cuda_alloc holds: each pointer's size, the total and its peak (allocations are rare: one
// lock is enough).
struct Accounting {
  std::mutex lock;
  std::unordered_map<void*, size_t> sizes;
  size_t now = 0, peak = 0;
};
Accounting& accounting() {
  static Accounting* a = new Accounting;  // never destroyed: frees may come from static destructors
  return *a;
}

}  // namespace

void* cuda_alloc(size_t bytes) {
  if (bytes == 0) return nullptr;
  void* p = nullptr;
  LS_CHECK_CUDA(cudaMalloc(&p, bytes));
  Accounting& a = accounting();
  const std::lock_guard<std::mutex> hold(a.lock);
  a.sizes[p] = bytes;
  a.now += bytes;
  a.peak = std::max(a.peak, a.now);
  return p;
}

void cuda_free(void* device) noexcept {
  if (device == nullptr) return;
  (void)cudaFree(device);
  Accounting& a = accounting();
  const std::lock_guard<std::mutex> hold(a.lock);
  if (const auto it = a.sizes.find(device); it != a.sizes.end()) {
    a.now -= it->second;
    a.sizes.erase(it);
  }
}

size_t cuda_allocated_bytes() {
  Accounting& a = accounting();
  const std::lock_guard<std::mutex> hold(a.lock);
  return a.now;
}

size_t cuda_peak_allocated_bytes() {
  Accounting& a = accounting();
  const std::lock_guard<std::mutex> hold(a.lock);
  return a.peak;
}

void cuda_reset_peak_allocated() {
  Accounting& a = accounting();
  const std::lock_guard<std::mutex> hold(a.lock);
  a.peak = a.now;
}

void cuda_copy_to_device(void* device_dst, const void* host_src, size_t bytes) {
  if (bytes == 0) return;
  LS_CHECK_CUDA(cudaMemcpy(device_dst, host_src, bytes, cudaMemcpyHostToDevice));
}

void cuda_copy_to_host(void* host_dst, const void* device_src, size_t bytes) {
  if (bytes == 0) return;
  LS_CHECK_CUDA(cudaMemcpy(host_dst, device_src, bytes, cudaMemcpyDeviceToHost));
}

void cuda_zero(void* device, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return;
  LS_CHECK_CUDA(cudaMemsetAsync(device, 0, bytes, stream));
}

cudaStream_t cuda_stream_create() {
  cudaStream_t s = nullptr;
  LS_CHECK_CUDA(cudaStreamCreate(&s));
  return s;
}

void cuda_stream_destroy(cudaStream_t stream) noexcept {
  if (stream != nullptr) (void)cudaStreamDestroy(stream);
}

void cuda_stream_synchronize(cudaStream_t stream) { LS_CHECK_CUDA(cudaStreamSynchronize(stream)); }

void* cuda_host_alloc(size_t bytes) {
  if (bytes == 0) return nullptr;
  void* p = nullptr;
  LS_CHECK_CUDA(cudaMallocHost(&p, bytes));
  return p;
}

void cuda_host_free(void* host) noexcept {
  if (host != nullptr) (void)cudaFreeHost(host);
}

void cuda_copy_to_device_async(void* device_dst, const void* host_src, size_t bytes,
                               cudaStream_t stream) {
  if (bytes == 0) return;
  LS_CHECK_CUDA(cudaMemcpyAsync(device_dst, host_src, bytes, cudaMemcpyHostToDevice, stream));
}

void cuda_copy_on_device_async(void* device_dst, const void* device_src, size_t bytes,
                               cudaStream_t stream) {
  if (bytes == 0) return;
  LS_CHECK_CUDA(cudaMemcpyAsync(device_dst, device_src, bytes, cudaMemcpyDeviceToDevice, stream));
}

void cuda_copy_to_host_async(void* host_dst, const void* device_src, size_t bytes,
                             cudaStream_t stream) {
  if (bytes == 0) return;
  LS_CHECK_CUDA(cudaMemcpyAsync(host_dst, device_src, bytes, cudaMemcpyDeviceToHost, stream));
}

cudaEvent_t cuda_event_create() {
  cudaEvent_t e = nullptr;
  LS_CHECK_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}

void cuda_event_destroy(cudaEvent_t event) noexcept {
  if (event != nullptr) (void)cudaEventDestroy(event);
}

void cuda_event_record(cudaEvent_t event, cudaStream_t stream) {
  LS_CHECK_CUDA(cudaEventRecord(event, stream));
}

void cuda_stream_wait_event(cudaStream_t stream, cudaEvent_t event) {
  LS_CHECK_CUDA(cudaStreamWaitEvent(stream, event, 0));
}

void cuda_event_synchronize(cudaEvent_t event) { LS_CHECK_CUDA(cudaEventSynchronize(event)); }

cudaEvent_t cuda_timing_event_create() {
  cudaEvent_t e = nullptr;
  LS_CHECK_CUDA(cudaEventCreate(&e));
  return e;
}

float cuda_event_elapsed_ms(cudaEvent_t start, cudaEvent_t stop) {
  float ms = 0;
  LS_CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
  return ms;
}

void cuda_capture_begin(cudaStream_t stream) {
  LS_CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed));
}

cudaGraphExec_t cuda_capture_end(cudaStream_t stream, std::string* why) {
  cudaGraph_t graph = nullptr;
  cudaError_t rc = cudaStreamEndCapture(stream, &graph);
  if (rc != cudaSuccess) {
    (void)cudaGetLastError();
    if (graph != nullptr) (void)cudaGraphDestroy(graph);
    *why = std::string("cudaStreamEndCapture: ") + cudaGetErrorName(rc) + ": " +
           cudaGetErrorString(rc);
    return nullptr;
  }
  cudaGraphExec_t exec = nullptr;
  rc = cudaGraphInstantiate(&exec, graph, 0);
  (void)cudaGraphDestroy(graph);  // the executable graph keeps what it needs
  if (rc != cudaSuccess) {
    (void)cudaGetLastError();
    *why = std::string("cudaGraphInstantiate: ") + cudaGetErrorName(rc) + ": " +
           cudaGetErrorString(rc);
    return nullptr;
  }
  return exec;
}

void cuda_capture_discard(cudaStream_t stream) noexcept {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) == cudaSuccess &&
      status != cudaStreamCaptureStatusNone) {
    cudaGraph_t graph = nullptr;
    (void)cudaStreamEndCapture(stream, &graph);
    if (graph != nullptr) (void)cudaGraphDestroy(graph);
  }
  (void)cudaGetLastError();
}

void cuda_graph_launch(cudaGraphExec_t graph, cudaStream_t stream) {
  LS_CHECK_CUDA(cudaGraphLaunch(graph, stream));
}

void cuda_graph_destroy(cudaGraphExec_t graph) noexcept {
  if (graph != nullptr) (void)cudaGraphExecDestroy(graph);
}

}  // namespace lockstep::kernels
