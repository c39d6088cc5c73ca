#include "runtime/model/cpu_plan.h"

#include "runtime/model/layer_registry.h"

namespace lockstep {
namespace {

const LayerType& type_of(const LayerPlan& p) { return find_layer_type(p.spec.type); }

// The activation a layer computes, for the layer before it to fuse or commute with; none for an
// absorbed layer (its work is already done elsewhere).
Activation activation_of(const LayerPlan& p) {
  return p.absorbed ? Activation::none : type_of(p).activation;
}

// Step 1 and 3 of plan_cpu. A layer already fused, or absorbed (it runs nothing of its own), is
// not asked again.
void fuse_activations(std::vector<LayerPlan>& plan) {
  for (size_t i = 0; i + 1 < plan.size(); ++i) {
    LayerPlan& self = plan[i];
    LayerPlan& next = plan[i + 1];
    const Activation act = activation_of(next);
    if (act == Activation::none || self.fused_relu || self.absorbed) continue;
    const LayerType& type = type_of(self);
    if (!type.fuses_activation || !type.fuses_activation(self, act)) continue;
    self.fused_relu = act == Activation::relu;
    next.absorbed = true;
  }
}

// Step 2 of plan_cpu. Each hand-off is asked with the layouts it would run with already set (the
// sender's input side settled by the hand-off before it, both ends of this one blocked), so a
// convolution's hooks check oneDNN's choice on exactly those layouts; a refused hand-off is undone.
void keep_activations_blocked(std::vector<LayerPlan>& plan, int max_batch) {
  for (size_t i = 0; i + 1 < plan.size(); ++i) {
    size_t next = i + 1;  // the next layer that cares about the layout
    while (next < plan.size() && type_of(plan[next]).layout_agnostic) ++next;
    if (next == plan.size()) return;
    LayerPlan& from = plan[i];
    LayerPlan& to = plan[next];
    const LayerType& from_type = type_of(from);
    const LayerType& to_type = type_of(to);
    from.out_blocked16 = to.in_blocked16 = true;
    if (from_type.hands_on_blocked16 && from_type.hands_on_blocked16(from, max_batch) &&
        to_type.takes_blocked16 && to_type.takes_blocked16(to, max_batch)) {
      for (size_t r = i + 1; r < next; ++r) plan[r].in_blocked16 = plan[r].out_blocked16 = true;
    } else {
      from.out_blocked16 = to.in_blocked16 = false;
    }
    i = next - 1;
  }
}

// Step 4 of plan_cpu. The fused layer's whole plan goes into fused_next rather than fields of the
// fusing type's own (a pool's window and ReLU), so LayerPlan needs no field per fusion and a
// registered type's fusion carries what it needs the same way; the kernel then writes the fused
// layer's output, in its layout. Only the model's first layer is told `first`: its input gradient
// is never asked for (Model::backward passes it none), which a kernel without one needs.
void fuse_next_layers(std::vector<LayerPlan>& plan) {
  for (size_t i = 0; i + 1 < plan.size(); ++i) {
    LayerPlan& self = plan[i];
    LayerPlan& next = plan[i + 1];
    if (self.absorbed || next.absorbed) continue;
    const LayerType& type = type_of(self);
    if (!type.fuses_next || !type.fuses_next(self, next, i == 0)) continue;
    self.fused_next.push_back(next);
    self.out_blocked16 = next.out_blocked16;
    next.absorbed = true;
    ++i;
  }
}

}  // namespace

std::vector<LayerPlan> commute_activations(std::vector<LayerPlan> plan) {
  for (size_t i = 0; i + 1 < plan.size(); ++i) {
    const Activation act = activation_of(plan[i]);
    const LayerType& next_type = type_of(plan[i + 1]);
    if (act == Activation::none || plan[i + 1].params != 0 || !next_type.commutes_with ||
        !next_type.commutes_with(plan[i + 1], act))
      continue;
    // The activation is elementwise: it takes the other layer's output shape where it now runs.
    LayerPlan moved = plan[i + 1], activation = plan[i];
    moved.in = activation.in;
    activation.in = activation.out = moved.out;
    activation.commuted = true;
    plan[i] = std::move(moved);
    plan[i + 1] = std::move(activation);
    ++i;
  }
  return plan;
}

void plan_cuda(std::vector<LayerPlan>& plan, bool fuse) {
  if (!fuse) return;
  for (size_t i = 0; i + 1 < plan.size(); ++i) {
    LayerPlan& self = plan[i];
    LayerPlan& next = plan[i + 1];
    const LayerType& type = type_of(self);
    if (!type.fuses_next_cuda || !type.fuses_next_cuda(self, next, i == 0)) continue;
    LayerPlan fused = next;
    if (i + 2 < plan.size() && activation_of(plan[i + 2]) == Activation::relu) {
      fused.fused_relu = true;
      plan[i + 2].absorbed = true;
    }
    self.fused_next.push_back(fused);
    next.absorbed = true;
    i += fused.fused_relu ? 2 : 1;
  }
}

void plan_cpu(std::vector<LayerPlan>& plan, int max_batch, CpuKernels kernels) {
  fuse_activations(plan);
  if (kernels != CpuKernels::best) return;
  keep_activations_blocked(plan, max_batch);
  fuse_activations(plan);
  fuse_next_layers(plan);
}

}  // namespace lockstep
