// The layer types a --model spec can name, one LayerType record each: how its token reads, how it
// plans its shapes and parameters, how its parameters start, and the factories of its CPU and CUDA
// layers. The built-in types (runtime/model/layers/builtin.cpp) are registered on the registry's
// first use; register_layer() adds more (a test's, a program's) before any spec names them. A type
// is never removed, so the references lookups return stay valid for the process. Registration and
// lookup are thread-safe (one mutex); a type's functions must be safe to call from any thread.
//
// Adding a layer: runtime/model/layers/NAME.{h,cpp} (the CPU layer and its LayerType),
// NAME_cuda.cu and NAME_cuda_stub.cpp (its CUDA twin, when it has one), one line in builtin.cpp,
// and its test. runtime/README.md walks through it.
// No collective calls; a program registers the same types on every rank.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/stream.h"
#include "runtime/base/device_kind.h"
#include "runtime/base/knobs.h"
#include "runtime/base/precision.h"
#include "runtime/model/layers.h"
#include "runtime/model/model_spec.h"

namespace lockstep {

// A bf16 model's one copy of its parameters (ModelPlacement::bf16_params): the bf16 word of every
// float of the model's flat parameters, at the same offset, kept current by whoever changes them
// (Model::write_params, the optimizer's update). The model fills it in once its buffers exist,
// before any forward pass.
struct Bf16Params {
  const float* params = nullptr;    // the model's flat parameters
  const uint16_t* words = nullptr;  // their bf16 words
  // The words of the parameters that start at p (a pointer into the model's parameters) where they
  // lie on 256 bytes, as a layer's own copy would (cudaMalloc's alignment): cuBLASLt picks its
  // algorithm by the operands' alignment, so the bits of a product could differ otherwise. Null
  // where they do not (the layer then casts a copy of its own).
  const uint16_t* aligned(const float* p) const {
    const uint16_t* w = words + (p - params);
    return reinterpret_cast<uintptr_t>(w) % 256 == 0 ? w : nullptr;
  }
};

// Where a CUDA layer computes: the stream its work is queued on, whether its GEMMs run in bf16,
// whether its training steps are replayed from CUDA graphs (ModelPlacement::graphs), the
// environment knobs that pick its kernels (knobs.h: the convolution families, the attention path),
// and, for bf16 layers, the model's copy of its parameters in bf16 when it keeps one: the layer's
// bf16 products then read their weights from there instead of casting them at every forward (and
// hold a copy of their own only where their words lie off 256 bytes in it: Bf16Params::aligned).
struct CudaLayerPlacement {
  cudaStream_t stream = nullptr;
  Precision precision = Precision::fp32;
  bool graphs = false;
  Knobs knobs;
  const Bf16Params* bf16_params = nullptr;
};

// A named piece of a layer's parameters ("weight", "bias") with its shape; a layer's pieces follow
// each other in its parameter range and cover it.
struct LayerTensor {
  std::string name;
  std::vector<int64_t> shape;
};

// An elementwise activation that a neighbouring layer can apply in its own pass, or run after
// (LayerType::activation): relu is y = max(x, 0), its gradient stopped where y = 0. A second one
// (GELU) would add a value here and a LayerPlan flag beside fused_relu.
enum class Activation { none, relu };

struct LayerType {
  // The word a spec names it by, and the prefix of its parameter names ("dense6.weight").
  std::string name;
  // How the grammar hint of --model errors shows it: "convKxK:channels[:stride]".
  std::string syntax;
  // The word goes on after the name ("maxpool2", "conv3x3"): LayerToken::suffix() holds the rest.
  bool name_takes_suffix = false;
  // Its --trace spans and NVTX ranges ("conv2d"); empty: `name`.
  std::string span_name;

  // Reads a token's suffix and ':' arguments into LayerSpec::args (refusing through the token).
  std::function<std::vector<int>(const LayerToken&)> parse;
  // The canonical token of a spec of this type: parse of it gives the same args back.
  std::function<std::string(const LayerSpec&)> format;
  // Fills plan.out and plan.params from plan.spec and plan.in, refusing through the check.
  std::function<void(LayerPlan& plan, const LayerCheck& check)> plan;
  // Writes the initial parameters into host[0, plan.params) from gen, in a fixed order; unset for
  // a type without parameters.
  std::function<void(const LayerPlan&, float* host, std::mt19937_64& gen)> init;
  // The named pieces of its parameters, in buffer order (checkpoints store them by these names).
  std::function<std::vector<LayerTensor>(const LayerPlan&)> tensors;
  // The CPU layer, and the CUDA one; unset make_cuda: the type is CPU-only and a model of it on
  // CUDA is refused when it is built, before any device work.
  std::function<std::unique_ptr<Layer>(const LayerPlan&, CpuKernels)> make_cpu;
  std::function<std::unique_ptr<Layer>(const LayerPlan&, const CudaLayerPlacement&)> make_cuda;
  // Per sample: forward FLOPs of its matrix work (for benchmarks), and the host scratch floats its
  // CPU layer builds beyond its output (conv's im2col matrix; for the memory estimate). Unset: 0.
  std::function<double(const LayerPlan&)> forward_flops;
  std::function<double(const LayerPlan&)> scratch_floats;
  // Whether its layers follow LayerPlan::recompute: under Recompute::blocks what scratch_floats
  // counts then lives in the model's shared workspace, one layer's at a time.
  bool recomputes = false;

  // Plan hooks: how a layer of this type takes part in the model's rewrites of its plan
  // (runtime/model/cpu_plan.h). All optional: a type that sets none runs as written. The planner
  // asks only these, never a type's name, so a registered type takes part by setting them; they
  // read the plans they are given and change nothing (the planner sets the LayerPlan fields).
  //
  // What the layer is, for its neighbours: the activation it computes (relu), which a layer before
  // it may apply instead (fuses_activation; this layer then runs as a view) or run before (a
  // commutes_with layer); whether it is elementwise whatever the layout, so 16-channel blocks pass
  // through it (relu); and, when it is a K x K, stride-K max-pool of NHWC images (maxpool), K (0:
  // it is not), which a layer before it reads to run it in its own kernel (fuses_next).
  Activation activation = Activation::none;
  bool layout_agnostic = false;
  std::function<int(const LayerPlan&)> max_pool_window;
  // Every device: whether the activation `act` directly before this layer computes the same
  // function and gradient after it, where the plan then runs it (maxpool, for relu: over 1/K^2 of
  // the values). Only asked of a layer without parameters (a swap would renumber them).
  std::function<bool(const LayerPlan& self, Activation act)> commutes_with;
  // CPU: whether the CPU layer of `self` applies `act` (the next layer's activation) to its output
  // in its own forward pass, and masks its incoming gradient by it (LayerPlan::fused_relu). Asked
  // before the layouts are settled and, with CpuKernels::best, again after (a layer that fuses
  // only on some layout: maxpool on blocked input).
  std::function<bool(const LayerPlan& self, Activation act)> fuses_activation;
  // CPU, CpuKernels::best: whether its CPU layer writes its output and reads its output's
  // gradient (hands_on), or reads its input and writes its input's gradient (takes), in oneDNN's
  // 16-channel blocks (aBcd16b) without a reorder at every batch up to max_batch. Asked in layer
  // order with the hand-off's two ends already marked blocked in `self` (hands_on sees its
  // in_blocked16 settled); a hand-off needs both ends' yes.
  std::function<bool(const LayerPlan& self, int max_batch)> hands_on_blocked16;
  std::function<bool(const LayerPlan& self, int max_batch)> takes_blocked16;
  // CPU, CpuKernels::best, last: whether the CPU layer of `self` runs `next` (the layer after it,
  // with next's fused activation) in its own kernel, writing next's output in next's layout; it
  // then finds next's plan in self.fused_next, and next runs as a view. `first`: self is the
  // model's first layer, whose input gradient is never asked for (conv: the first convolution over
  // one channel and the max-pool after it, on AVX-512).
  std::function<bool(const LayerPlan& self, const LayerPlan& next, bool first)> fuses_next;
  // CUDA, LOCKSTEP_CUDA_CONV_POOL=fused: the same question of its CUDA layer; a ReLU directly
  // after `next` then runs in the same kernels too (the planner sets next's fused_relu and
  // absorbs it: conv, the first convolution over one channel with the max-pool and ReLU after it).
  std::function<bool(const LayerPlan& self, const LayerPlan& next, bool first)> fuses_next_cuda;

  const std::string& span() const { return span_name.empty() ? name : span_name; }
};

// Adds a type. Throws std::invalid_argument when the name is taken or a required function (parse,
// format, plan, make_cpu; tensors and init when it can have parameters) is missing.
void register_layer(LayerType type);

// The type of that name; throws UsageError listing the known names when there is none.
const LayerType& find_layer_type(const std::string& name);
// The type a token's word names: the one whose name is the whole word, or the longest one that
// is a prefix of it among types whose name takes a suffix (*suffix gets the rest). Null if none.
const LayerType* match_layer_type(const std::string& word, std::string* suffix);
// Names and syntaxes of the registered types, in registration order (built-ins first).
std::vector<std::string> layer_type_names();
std::vector<std::string> layer_type_syntaxes();

// The layer of a plan on the CPU, or on CUDA; the latter throws UsageError when its type is
// CPU-only (check_cuda_layers() finds that for a whole plan first).
std::unique_ptr<Layer> make_cpu_layer(const LayerPlan& plan, CpuKernels kernels = CpuKernels::best);
std::unique_ptr<Layer> make_cuda_layer(const LayerPlan& plan, const CudaLayerPlacement& where);
// Throws UsageError naming the first layer of `plan` whose type has no CUDA layer. The spec's
// overload needs no data shape, so a program can refuse --device cuda before it opens a device.
void check_cuda_layers(const std::vector<LayerPlan>& plan);
void check_cuda_layers(const ModelSpec& spec);

// Writes the initial parameters of a layer planned as `plan` into host[0, plan.params), drawing
// from `gen` in the type's fixed order (nothing for layers without parameters).
void init_layer_params(const LayerPlan& plan, float* host, std::mt19937_64& gen);

}  // namespace lockstep
