// Stands in for conv_cuda.cu in a build without CUDA (layers_available(DeviceKind::cuda) is false
// there, so programs refuse --device cuda before asking for it).
#include "kernels/cuda/stub.h"
#include "runtime/model/layers/conv.h"

namespace lockstep {

std::unique_ptr<Layer> make_conv_cuda(const LayerPlan&, const CudaLayerPlacement&) {
  kernels::cuda_not_built("make_conv_cuda");
}

}  // namespace lockstep
