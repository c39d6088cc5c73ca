// Stands in for maxpool_cuda.cu in a build without CUDA (layers_available(DeviceKind::cuda) is
// false there, so programs refuse --device cuda before asking for it).
#include "kernels/cuda/stub.h"
#include "runtime/model/layers/maxpool.h"

namespace lockstep {

std::unique_ptr<Layer> make_maxpool_cuda(const LayerPlan&, const CudaLayerPlacement&) {
  kernels::cuda_not_built("make_maxpool_cuda");
}

}  // namespace lockstep
