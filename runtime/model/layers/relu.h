// The ReLU layer type: "relu", y = max(x, 0) elementwise, any shape, no parameters or args.
// relu.cpp holds the CPU layer and the type's record; relu_cuda.cu the CUDA twin,
// relu_cuda_stub.cpp its stand-in in a build without CUDA. The backward pass reads the output
// (y > 0), not the input. Stateless functions; the layers are used by one thread at a time.
// No collective calls.
#pragma once

#include <memory>

#include "runtime/model/layer_registry.h"

namespace lockstep {

LayerType relu_layer_type();

std::unique_ptr<Layer> make_relu_cuda(const LayerPlan& plan, const CudaLayerPlacement& where);

}  // namespace lockstep
