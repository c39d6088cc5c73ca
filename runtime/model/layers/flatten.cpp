#include "runtime/model/layers/flatten.h"

namespace lockstep {

LayerType flatten_layer_type() {
  LayerType t;
  t.name = "flatten";
  t.parse = [](const LayerToken& tok) {
    tok.expect_args(0, 0);
    return std::vector<int>{};
  };
  t.format = [](const LayerSpec&) { return std::string("flatten"); };
  t.plan = [](LayerPlan& p, const LayerCheck& check) {
    if (shape_size(p.in) >= kMaxLayerSize) check.fail(" is too large");
    p.out = {static_cast<int>(shape_size(p.in))};
  };
  t.make_cpu = [](const LayerPlan& p, CpuKernels) -> std::unique_ptr<Layer> {
    return std::make_unique<PassThroughLayer>(p);
  };
  t.make_cuda = [](const LayerPlan& p, const CudaLayerPlacement&) -> std::unique_ptr<Layer> {
    return std::make_unique<PassThroughLayer>(p);
  };
  return t;
}

}  // namespace lockstep
