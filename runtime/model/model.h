// Model: a stack of layers over one flat parameter buffer and one flat gradient buffer (DESIGN.md
// decision 4). Layer i's parameters are the range param_ranges()[i] of both buffers, in layer
// order, so a collective can reduce all gradients at once, or ranges of them (buckets, taken in
// reverse layer order) as the backward pass finishes each layer.
//
// Each layer's range starts at a multiple of kParamAlignFloats (256 bytes), so that a bucket, which
// starts at a layer, hands NCCL and cuBLAS aligned pointers. The gaps between ranges hold zeros in
// both buffers, and stay zero: no layer writes them, init_params() and checkpoints (by tensor name)
// leave them alone, and every optimizer update keeps a parameter with zero gradient and zero state
// at zero. Whole-buffer operations (reductions, clipping, updates) may include them.
//
// The model owns every buffer a step touches (activations, activation gradients, scratch, the
// output gradient), sized once for batches up to max_batch, so steps do not allocate. forward()
// keeps its activations for the next backward(). Before its layers are built the model rewrites
// its plan (cpu_plan.h, through the layer types' plan hooks): a relu directly followed by a
// maxpool runs as maxpool then relu (the same function and gradient, less work), so plan() lists
// them in the order they run; layer indices and parameter names are those of the spec. On the CPU
// a convolution directly followed by a ReLU applies it in its own forward pass (LayerPlan::
// fused_relu), and so does a max-pool on blocked activations, and the ReLU layer passes its input
// through; on AVX-512 a first convolution over one input channel runs the max-pool after it too
// (LayerPlan::fused_next), which then passes its input through (LayerPlan::absorbed), and so does
// a CUDA model's with LOCKSTEP_CUDA_CONV_POOL=fused (the ReLU after the pool with them).
//
// Each layer is its type's (layer_registry.h) CPU layer or CUDA twin; a spec naming a CPU-only
// type is refused on CUDA before any device work.
//
// Placement: on DeviceKind::cuda every buffer is device memory and the layers queue their work on
// the placement's stream; params(), grads(), forward()'s input and output and output_grad() are
// then device pointers. Host code reads or writes parameters only through params_to_host() and
// write_params() (synchronous copies); init_params() draws on the host and copies up, so a seed
// gives the same parameters on either device. Used by one thread (which may share its work among
// the rank's threads: ModelPlacement::lanes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/base/buffer.h"
#include "runtime/base/knobs.h"
#include "runtime/model/layer_registry.h"
#include "runtime/model/model_spec.h"

namespace lockstep {

struct ParamRange {
  size_t offset = 0;  // into params() / grads()
  size_t count = 0;
  int layer = 0;
};

// A named piece of the flat buffers, for checkpoints and inspection: "conv0.weight" (HWIO),
// "conv0.bias", "dense6.weight" ((in, out)), ... The number is the layer's index in the stack.
struct ParamTensorInfo {
  std::string name;
  std::vector<int64_t> shape;
  size_t offset = 0;  // into params() / grads()
  size_t count = 0;
};

// The parameter tensors a model planned as `plan` has, in Model::param_tensors()'s order, names
// and shapes, without building it (no parameters allocated): a checkpoint's tensors can be checked
// against a spec without the model. `layer_offsets`, where given, holds each layer's first float in
// the flat buffers (indexed by layer) and the offsets are the model's; otherwise they count from
// each layer's start.
std::vector<ParamTensorInfo> planned_param_tensors(
    const std::vector<LayerPlan>& plan, const std::vector<size_t>* layer_offsets = nullptr);

class GpuTrace;

// Where a model computes: the CPU, or a CUDA device through one stream (the current device's).
struct ModelPlacement {
  DeviceKind device = DeviceKind::cpu;
  cudaStream_t stream = nullptr;          // cuda: the stream every layer's work goes to
  Precision precision = Precision::fp32;  // cuda: bf16 GEMMs (layer_registry.h: make_cuda_layer)
  // cuda: the recorder of `stream`'s spans (gpu_trace.h). With one, each layer's kernels are a
  // device-timed span under --trace, instead of the host span of their enqueueing (NVTX ranges
  // stay on the host, for Nsight); it must outlive the model.
  GpuTrace* trace = nullptr;
  // cpu: oneDNN or OpenBLAS kernels (layers.h: CpuKernels).
  CpuKernels cpu_kernels = CpuKernels::best;
  // cuda: the training steps will be replayed from CUDA graphs (DESIGN.md decision 18), where the
  // host's time to enqueue a kernel no longer delays the device: a layer that times its kernel
  // choices counts the device's time alone.
  bool graphs = false;
  // ZeRO (DESIGN.md decision 19): the ranks the gradient buckets are shared out among; > 1 aligns
  // every layer range, and the buffers' end, to kParamAlignFloats * shard_ranks floats, so that
  // any bucket of whole layers divides into equal blocks. 1: the unsharded layout.
  int shard_ranks = 1;
  // ZeRO stage 2: false, the model allocates no gradient buffer (grads() is null) and
  // bind_gradients() places each layer's gradients before the first backward pass.
  bool own_gradients = true;
  // What the layers recompute in their backward passes instead of keeping it (--recompute: the
  // GPT blocks' activations, gpt_layers.h), trading a second forward pass for memory.
  Recompute recompute = Recompute::none;
  // The environment knobs its layers follow (knobs.h), the process's by default: a test may set
  // another value for one model.
  Knobs knobs = configured_knobs();
  // cuda, bf16: the model keeps one bf16 copy of its parameters (params16()), which its layers'
  // bf16 products read instead of casting their weights at every forward pass (DESIGN.md decision
  // 4). write_params() and init_params() keep it current; whoever else writes params() must
  // write the copy too (the optimizer's update does: Optimizer::set_params16). Ignored elsewhere.
  bool bf16_params = false;
  // cpu: lanes (kernels/step/thread_lanes.h): up to this many of the rank's threads each run
  // forward and backward over their own rows of the batch, with layers, scratch and (beyond the
  // first lane) gradients of their own, added into grads() layer by layer in lane order as the
  // backward pass finishes each layer. 1: every operation shared by the threads. All or none: 1 on
  // CUDA, with CpuKernels::openblas, without own_gradients, where max_batch has fewer rows than
  // lanes or where the other lanes' gradients would take more than kLaneGradientBytes (a forward
  // pass of fewer rows than lanes runs a lane per row).
  int lanes = 1;
};

// What the gradient buffers of the lanes beyond the first may take in all (ModelPlacement::lanes).
constexpr size_t kLaneGradientBytes = size_t{1} << 30;

// Layer ranges start at multiples of this many floats (256 bytes).
constexpr size_t kParamAlignFloats = 256 / sizeof(float);

class Model {
 public:
  // Plans the model against the data (UsageError when it does not fit) and allocates its buffers.
  // `outputs` values at each of `positions` positions per sample (plan_model); outputs() is their
  // product.
  Model(const ModelSpec& spec, const SampleShape& input, int outputs, int max_batch,
        const ModelPlacement& placement = {}, int positions = 1);
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  // Floats in params() and grads(), alignment gaps included: what whole-buffer operations cover.
  size_t param_count() const { return params_.size(); }
  // The model's parameters, gaps excluded: what summary() reports.
  size_t trainable_count() const { return trainable_; }
  float* params() { return params_.data(); }
  const float* params() const { return params_.data(); }
  // Null without own gradients (ModelPlacement::own_gradients).
  float* grads() { return grads_.data(); }
  const float* grads() const { return grads_.data(); }
  // Rebinds every layer's gradient view (and a tied layer's view of its target's) to at(offset),
  // where `offset` is the start of the layer's range in the flat layout: for gradients kept
  // elsewhere than grads() (ZeRO stage 2, where the reducer owns them). zero_grads() then does
  // nothing; the new owner zeroes them.
  void bind_gradients(const std::function<float*(size_t offset)>& at);
  DeviceKind device() const { return placement_.device; }
  cudaStream_t stream() const { return placement_.stream; }
  // A host copy of the parameters (synchronous: after the work queued so far).
  std::vector<float> params_to_host() const { return params_.to_host(); }
  // Overwrites params[offset, offset + count) from host memory (and their bf16 copy's words).
  void write_params(size_t offset, const float* host, size_t count);
  // The bf16 copy of params() (ModelPlacement::bf16_params), null when the model keeps none.
  uint16_t* params16() { return params16_.data(); }
  // One range per layer that has parameters, in layer order.
  const std::vector<ParamRange>& param_ranges() const { return ranges_; }
  // Per layer of plan(): the floats of the flat buffers from the start of its range to the start
  // of the next one (its parameters and the gap after them; 0 for a layer without parameters).
  // They add up to param_count(): the layer sizes to give assign_buckets (buckets.h), so that every
  // bucket starts at an aligned layer and the buckets cover the whole buffer.
  std::vector<size_t> layer_spans() const;
  // The layers whose gradients another layer adds to (the targets of LayerPlan::tied), in order.
  std::vector<int> tie_targets() const;
  // Weights and biases of every layer, in buffer order; together they cover every parameter (the
  // buffer less its alignment gaps).
  std::vector<ParamTensorInfo> param_tensors() const;

  int max_batch() const { return max_batch_; }
  int outputs() const { return outputs_; }  // floats per sample: positions() * classes
  int positions() const { return positions_; }
  size_t input_size() const { return input_size_; }  // floats per sample
  const std::vector<LayerPlan>& plan() const { return plan_; }

  // Fills params() from a generator seeded with `seed`, layer by layer (deterministic, drawn on
  // the host whatever the placement).
  void init_params(uint64_t seed);
  void zero_grads();

  // Runs the layers on x[batch, input_size()] (batch <= max_batch); returns the outputs
  // [batch, outputs()], valid until the next forward. bf16_ok: the caller takes outputs in bf16
  // words; where the last layer can write them (bf16_output_supported: a bf16 run's tied head on
  // the GPU) and the knobs ask for them (LOCKSTEP_CUDA_LOGITS=bf16), the outputs are bf16 words
  // and output_grad() takes bf16 words too, until the next forward. output_bf16() says which.
  const float* forward(const float* x, int batch, bool bf16_ok = false);
  bool bf16_output_supported() const;
  bool output_bf16() const { return output_bf16_; }
  // Where the caller writes dLoss/doutputs [batch, outputs()] before backward().
  float* output_grad() { return output_grad_.data(); }
  // Back-propagates output_grad() through the activations of the last forward (same batch),
  // accumulating into grads().
  // layer_done(i), when set, is called once layer i's gradients are final (views are skipped), in
  // decreasing i: the trainer starts bucket reductions from it.
  void backward(int batch, const std::function<void(int layer)>& layer_done = nullptr);

  // "conv3x3:32 (28, 28, 1) -> (28, 28, 32), 320 params" per layer, and the total.
  std::string summary() const;
  // The lanes a forward pass of a full batch runs in (ModelPlacement::lanes, as built).
  int lanes() const { return static_cast<int>(lanes_.size()) + 1; }

 private:
  struct Lane;  // a lane beyond the first (model.cpp)
  // A layer that computes in the backward pass: the gradient it reads and the dx it writes (null
  // for the first that computes), and its range in ranges_ (-1: no parameters of its own).
  struct BackwardStep {
    size_t layer;
    const float* dy;
    float* dx;
    int range;
  };
  int lanes_for(int batch) const;
  Layer& lane_layer(int lane, size_t i);  // layer i of lane `lane` (0: layers_)
  float* lane_workspace(int lane);
  // Layer `i`'s forward or backward pass over rows [first, first + rows) of the batch, with
  // `layer` (layers_[i] or a lane's) and `workspace`.
  void forward_rows(Layer& layer, size_t i, int first, int rows, float* workspace);
  void backward_rows(Layer& layer, size_t i, int first, int rows, const float* dy, float* dx,
                     float* workspace);
  void forward_lanes(int batch, int lanes);
  void backward_lanes(int batch, int lanes, const std::function<void(int layer)>& layer_done);

  ModelPlacement placement_;
  std::vector<LayerPlan> plan_;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<std::string> span_names_;  // per layer: its type's span name, for --trace
  std::vector<ParamRange> ranges_;
  size_t trainable_ = 0;
  int max_batch_ = 0;
  int outputs_ = 0;
  int positions_ = 1;
  size_t input_size_ = 0;
  size_t first_compute_ = 0;  // first layer that is not a view: it needs no input gradient
  bool output_bf16_ = false;  // the last forward's outputs (and the gradient it takes) in bf16
  Buffer<float> params_, grads_, workspace_, output_grad_;
  Buffer<uint16_t> params16_;  // ModelPlacement::bf16_params, in bf16_params_'s words
  Bf16Params bf16_params_;
  std::vector<Buffer<float>> activations_;  // activations_[i]: output of layer i (empty for views)
  std::vector<const float*> act_;           // act_[0]: the input; act_[i + 1]: layer i's output
  Buffer<float> dbuf_[2];                   // ping-pong activation gradients
  std::vector<BackwardStep> backward_steps_;  // last layer first
  std::vector<std::unique_ptr<Lane>> lanes_;
  std::vector<float*> grad_views_;  // per range: where the first lane's gradients go (bind)
  int last_lanes_ = 1;              // the lanes of the last forward pass
};

}  // namespace lockstep
