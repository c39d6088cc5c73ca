// Stands in for gpt_cuda.cu in a build without CUDA (layers_available(DeviceKind::cuda) is false
// there, so programs refuse --device cuda before asking for these).
#include "kernels/cuda/stub.h"
#include "runtime/model/layers/gpt.h"

namespace lockstep {

std::unique_ptr<Layer> make_embed_cuda(const LayerPlan&, const CudaLayerPlacement&) {
  kernels::cuda_not_built("make_embed_cuda");
}
std::unique_ptr<Layer> make_block_cuda(const LayerPlan&, const CudaLayerPlacement&) {
  kernels::cuda_not_built("make_block_cuda");
}
long cuda_gelu_epilogue_refusals() { return 0; }
std::unique_ptr<Layer> make_lmhead_cuda(const LayerPlan&, const CudaLayerPlacement&) {
  kernels::cuda_not_built("make_lmhead_cuda");
}

}  // namespace lockstep
