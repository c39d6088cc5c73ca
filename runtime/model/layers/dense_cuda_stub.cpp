// Stands in for dense_cuda.cu in a build without CUDA (layers_available(DeviceKind::cuda) is false
// there, so programs refuse --device cuda before asking for it).
#include "kernels/cuda/stub.h"
#include "runtime/model/layers/dense.h"

namespace lockstep {

std::unique_ptr<Layer> make_dense_cuda(const LayerPlan&, const CudaLayerPlacement&) {
  kernels::cuda_not_built("make_dense_cuda");
}

}  // namespace lockstep
