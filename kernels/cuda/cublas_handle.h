// One cuBLAS handle per (thread, CUDA device), created on first use and bound to the caller's
// stream on every call, for the CUDA twins (*.cu) only. cuBLAS handles must not be used by two
// threads at once; a thread_local cache keeps threads apart without a lock. Handles live until the
// process exits: destroying them from a thread_local destructor could run after the CUDA runtime
// has shut down. The math mode stays cuBLAS's default (true fp32, no TF32), so fp32 results match
// the CPU twins to fp32 rounding.
#pragma once

#include <cublas_v2.h>

#include "kernels/cuda/stream.h"

namespace lockstep::kernels {

// The calling thread's handle for the current device, with its stream set to `stream`.
cublasHandle_t cublas_handle(cudaStream_t stream);

}  // namespace lockstep::kernels
