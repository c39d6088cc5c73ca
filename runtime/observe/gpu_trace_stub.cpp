// Stands in for gpu_trace.cu when CUDA is not built: there is no stream to time, so nothing is
// recorded and no track is taken.
#include "runtime/observe/gpu_trace.h"

namespace lockstep {

struct GpuTrace::State {};

GpuTrace::GpuTrace(cudaStream_t, const std::string&) {}
GpuTrace::~GpuTrace() = default;
void GpuTrace::begin_traced(const char*, int64_t, const char*, const char*, int) {}
void GpuTrace::end_traced() {}
void GpuTrace::flush() {}

}  // namespace lockstep
