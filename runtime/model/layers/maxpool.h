// The max-pooling layer type: "maxpoolK", K x K windows at stride K over NHWC images, no
// parameters; its args are {K}. maxpool.cpp holds the CPU layer and the type's record;
// maxpool_cuda.cu the CUDA twin, maxpool_cuda_stub.cpp its stand-in in a build without CUDA. Each
// layer keeps the argmax of its last forward for the backward pass. Stateless functions; the
// layers are used by one thread at a time.
// No collective calls.
#pragma once

#include <memory>

#include "kernels/conv/pool.h"
#include "runtime/model/layer_registry.h"

namespace lockstep {

LayerType maxpool_layer_type();

// The kernels' shape of a planned pooling layer at a batch size (both twins call the kernels so).
inline kernels::PoolShape pool_shape(const LayerPlan& p, int batch) {
  return {batch, p.in[0], p.in[1], p.in[2], p.spec.args[0]};
}

std::unique_ptr<Layer> make_maxpool_cuda(const LayerPlan& plan, const CudaLayerPlacement& where);

}  // namespace lockstep
