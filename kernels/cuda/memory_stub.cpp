// Stands in for memory.cu when CUDA is not built: frees and destroys do nothing (there is
// nothing to free), every other call throws.
#include "kernels/cuda/memory.h"
#include "kernels/cuda/stub.h"

namespace lockstep::kernels {

void* cuda_alloc(size_t) { cuda_not_built("cuda_alloc"); }
void cuda_free(void*) noexcept {}
size_t cuda_allocated_bytes() { return 0; }
size_t cuda_peak_allocated_bytes() { return 0; }
void cuda_reset_peak_allocated() {}
void cuda_copy_to_device(void*, const void*, size_t) { cuda_not_built("cuda_copy_to_device"); }
void cuda_copy_to_host(void*, const void*, size_t) { cuda_not_built("cuda_copy_to_host"); }
void cuda_zero(void*, size_t, cudaStream_t) { cuda_not_built("cuda_zero"); }
cudaStream_t cuda_stream_create() { cuda_not_built("cuda_stream_create"); }
void cuda_stream_destroy(cudaStream_t) noexcept {}
void cuda_stream_synchronize(cudaStream_t) { cuda_not_built("cuda_stream_synchronize"); }
void* cuda_host_alloc(size_t) { cuda_not_built("cuda_host_alloc"); }
void cuda_host_free(void*) noexcept {}
void cuda_copy_to_device_async(void*, const void*, size_t, cudaStream_t) {
  cuda_not_built("cuda_copy_to_device_async");
}
void cuda_copy_on_device_async(void*, const void*, size_t, cudaStream_t) {
  cuda_not_built("cuda_copy_on_device_async");
}
void cuda_copy_to_host_async(void*, const void*, size_t, cudaStream_t) {
  cuda_not_built("cuda_copy_to_host_async");
}
cudaEvent_t cuda_event_create() { cuda_not_built("cuda_event_create"); }
void cuda_event_destroy(cudaEvent_t) noexcept {}
void cuda_event_record(cudaEvent_t, cudaStream_t) { cuda_not_built("cuda_event_record"); }
void cuda_stream_wait_event(cudaStream_t, cudaEvent_t) { cuda_not_built("cuda_stream_wait_event"); }
void cuda_event_synchronize(cudaEvent_t) { cuda_not_built("cuda_event_synchronize"); }
cudaEvent_t cuda_timing_event_create() { cuda_not_built("cuda_timing_event_create"); }
float cuda_event_elapsed_ms(cudaEvent_t, cudaEvent_t) { cuda_not_built("cuda_event_elapsed_ms"); }
void cuda_capture_begin(cudaStream_t) { cuda_not_built("cuda_capture_begin"); }
cudaGraphExec_t cuda_capture_end(cudaStream_t, std::string*) { cuda_not_built("cuda_capture_end"); }
void cuda_capture_discard(cudaStream_t) noexcept {}
void cuda_graph_launch(cudaGraphExec_t, cudaStream_t) { cuda_not_built("cuda_graph_launch"); }
void cuda_graph_destroy(cudaGraphExec_t) noexcept {}

}  // namespace lockstep::kernels
