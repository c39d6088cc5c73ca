// The model's rewrites of its plan (plan_model's layers) before its layers are built: an
// activation moved after a layer it commutes with (every device), on the CPU the fusions and
// activation layouts that spare passes over the activations (DESIGN.md decision 11), and on CUDA
// the one fusion of a first convolution with the max-pool after it, when asked for. The planner
// knows no layer type: it asks each layer's type through the optional plan hooks of its LayerType
// record (layer_registry.h: activation, layout_agnostic, max_pool_window, commutes_with,
// fuses_activation, hands_on_blocked16, takes_blocked16, fuses_next, fuses_next_cuda) and sets the
// generic LayerPlan fields they answer for (fused_relu, in_blocked16, out_blocked16, fused_next,
// absorbed); a type that sets no hook, a user's by default, runs as written, and a registered type
// takes part by setting them. The model owns its plan and calls these once, in its constructor.
// Pure functions of the plan and the registry: thread-safe once the layer types are registered.
// No collective calls: every rank plans the same model alike.
#pragma once

#include <vector>

#include "runtime/model/layers.h"
#include "runtime/model/model_spec.h"

namespace lockstep {

// Every device: an activation layer (LayerType::activation) directly followed by a layer without
// parameters whose type says the activation commutes with it (LayerType::commutes_with: relu
// before maxpool) runs after it instead: the same function and gradient over fewer values. The
// layers' in/out shapes follow the new order; a plan lists the layers in the order they run.
std::vector<LayerPlan> commute_activations(std::vector<LayerPlan> plan);

// On the CPU, with `kernels` (CpuKernels::openblas: the oracle runs only the fusions that do not
// depend on oneDNN's layouts), for batches up to max_batch, in this order (each step's hooks see
// what the earlier ones settled):
//   1. a layer whose type fuses the activation after it (fuses_activation) gets fused_relu, and
//      the activation layer is absorbed (the model makes it a view);
//   best only:
//   2. the activations between two layers that hand on and take 16-channel blocks
//      (hands_on_blocked16 / takes_blocked16; layout_agnostic layers between them pass the blocks
//      through) stay blocked: out_blocked16 / in_blocked16 on both and every layer between;
//   3. step 1 again, for a layer that fuses an activation only on the layouts just settled
//      (maxpool on a blocked input);
//   4. a layer whose type runs the next layer in its own kernel (fuses_next) gets that plan in
//      fused_next and its output layout (out_blocked16), and the next layer is absorbed.
void plan_cpu(std::vector<LayerPlan>& plan, int max_batch, CpuKernels kernels);

// On CUDA, with LOCKSTEP_CUDA_CONV_POOL=fused (`fuse`): a layer whose type runs the next layer in
// its CUDA layer's kernels (fuses_next_cuda) gets that plan in fused_next, with fused_relu set and
// the ReLU layer after it absorbed when there is one; the next layer is absorbed. Nothing without
// `fuse` (the CUDA layers run as written).
void plan_cuda(std::vector<LayerPlan>& plan, bool fuse);

}  // namespace lockstep
