// The convolution layer type: "convKxK:channels[:stride]", a K x K convolution over NHWC images
// with zero padding K/2 and weights HWIO then a bias per output channel. Its args are {K, channels,
// stride}. conv.cpp holds the CPU layer (OpenBLAS im2col + GEMM, oneDNN, our Winograd, or the
// fused first conv + max-pool; chosen once, when the layer is built) and the type's record with
// its plan hooks (cpu_plan.h); conv_cuda.cu the CUDA twin (fp32, or bf16 GEMMs; or the fused
// first conv + max-pool),
// conv_cuda_stub.cpp its stand-in in a build without CUDA. Stateless functions; the layers are
// used by one thread at a time.
// No collective calls.
#pragma once

#include <memory>

#include "kernels/conv/conv2d.h"
#include "runtime/model/layer_registry.h"

namespace lockstep {

LayerType conv_layer_type();

// The kernels' shape of a planned convolution at a batch size (both twins call the kernels so).
inline kernels::Conv2dShape conv2d_shape(const LayerPlan& p, int batch) {
  kernels::Conv2dShape s;
  s.n = batch;
  s.h = p.in[0];
  s.w = p.in[1];
  s.c_in = p.in[2];
  s.c_out = p.spec.args[1];
  s.kh = s.kw = p.spec.args[0];
  s.stride = p.spec.args[2];
  s.pad_h = s.pad_w = p.spec.args[0] / 2;
  return s;
}

// The max-pool a first convolution runs in its own kernels (LayerPlan::fused_next, cpu_plan.h):
// its window (0: none) and its fused ReLU, read from the pool's plan through the pool type's hook.
struct FusedPool {
  int k = 0;
  bool relu = false;
};
inline FusedPool fused_pool(const LayerPlan& p) {
  if (p.fused_next.empty()) return {};
  const LayerPlan& pool = p.fused_next.front();
  return {find_layer_type(pool.spec.type).max_pool_window(pool), pool.fused_relu};
}

std::unique_ptr<Layer> make_conv_cuda(const LayerPlan& plan, const CudaLayerPlacement& where);

}  // namespace lockstep
