#include <cstdint>

#include "kernels/cast.h"
#include "kernels/cuda/bf16.cuh"
#include "kernels/cuda/launch.cuh"

namespace lockstep::kernels {

namespace {

__global__ void f32_to_bf16_kernel(const float* __restrict__ in, uint16_t* __restrict__ out,
                                   size_t n) {
  for (size_t i = cuda::thread_index(); i < n; i += cuda::thread_stride())
    out[i] = cuda::to_bf16(in[i]);
}

// Four floats a thread (16-byte loads, 8-byte stores) where both buffers are aligned for it: the
// same words as the scalar kernel, in a quarter of the memory transactions.
__global__ void f32x4_to_bf16_kernel(const float4* __restrict__ in, uint2* __restrict__ out,
                                     size_t quads) {
  for (size_t i = cuda::thread_index(); i < quads; i += cuda::thread_stride()) {
    const float4 v = in[i];
    out[i] = make_uint2(cuda::to_bf16(v.x) | (uint32_t(cuda::to_bf16(v.y)) << 16),
                        cuda::to_bf16(v.z) | (uint32_t(cuda::to_bf16(v.w)) << 16));
  }
}

__global__ void bf16_to_f32_kernel(const uint16_t* __restrict__ in, float* __restrict__ out,
                                   size_t n) {
  for (size_t i = cuda::thread_index(); i < n; i += cuda::thread_stride())
    out[i] = cuda::from_bf16(in[i]);
}

}  // namespace

void cast_f32_to_bf16_cuda(const float* in, uint16_t* out, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  const bool aligned =
      reinterpret_cast<uintptr_t>(in) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 8 == 0;
  const size_t quads = aligned ? n / 4 : 0;
  if (quads > 0) {
    f32x4_to_bf16_kernel<<<cuda::grid_for(quads), cuda::kThreads, 0, stream>>>(
        reinterpret_cast<const float4*>(in), reinterpret_cast<uint2*>(out), quads);
    LS_CHECK_LAUNCH("f32x4_to_bf16_kernel");
    if (quads * 4 == n) return;
    in += quads * 4, out += quads * 4, n -= quads * 4;
  }
  f32_to_bf16_kernel<<<cuda::grid_for(n), cuda::kThreads, 0, stream>>>(in, out, n);
  LS_CHECK_LAUNCH("f32_to_bf16_kernel");
}

void cast_bf16_to_f32_cuda(const uint16_t* in, float* out, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  bf16_to_f32_kernel<<<cuda::grid_for(n), cuda::kThreads, 0, stream>>>(in, out, n);
  LS_CHECK_LAUNCH("bf16_to_f32_kernel");
}

}  // namespace lockstep::kernels
