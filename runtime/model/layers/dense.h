// The dense (fully connected) layer type: "dense[:units]", y = x W + b over the flattened input,
// W (in, out) then b (out) in its parameters. Without units it gives the data's outputs: its args
// are {units}, 0 for that. dense.cpp holds the CPU layer (OpenBLAS or oneDNN) and the type's
// record; dense_cuda.cu the CUDA twin (fp32, or bf16 GEMMs), dense_cuda_stub.cpp its stand-in in a
// build without CUDA. Stateless functions; the layers are used by one thread at a time.
// No collective calls.
#pragma once

#include <memory>

#include "kernels/dense.h"
#include "runtime/model/layer_registry.h"

namespace lockstep {

LayerType dense_layer_type();

// The kernels' shape of a planned dense layer at a batch size (both twins call the kernels so).
inline kernels::DenseShape dense_shape(const LayerPlan& p, int batch) {
  return {batch, static_cast<int>(shape_size(p.in)), static_cast<int>(shape_size(p.out))};
}

std::unique_ptr<Layer> make_dense_cuda(const LayerPlan& plan, const CudaLayerPlacement& where);

}  // namespace lockstep
