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

#include "kernels/cuda_stream.h"
#include "runtime/base/device_kind.h"
#include "runtime/base/precision.h"
#include "runtime/model/layers.h"
#include "runtime/model/model_spec.h"

namespace lockstep {

// Where a CUDA layer computes: the stream its work is queued on, whether its GEMMs run in bf16,
// and whether its training steps are replayed from CUDA graphs (ModelPlacement::graphs).
struct CudaLayerPlacement {
  cudaStream_t stream = nullptr;
  Precision precision = Precision::fp32;
  bool graphs = false;
};

// A named piece of a layer's parameters ("weight", "bias") with its shape; a layer's pieces follow
// each other in its parameter range and cover it.
struct LayerTensor {
  std::string name;
  std::vector<int64_t> shape;
};

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
