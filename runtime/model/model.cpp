#include "runtime/model/model.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "kernels/conv2d.h"
#include "kernels/conv_pool.h"
#include "kernels/cuda_memory.h"
#include "kernels/onednn.h"
#include "runtime/base/error.h"
#include "runtime/model/layers/conv.h"
#include "runtime/observe/gpu_trace.h"
#include "runtime/observe/nvtx.h"
#include "runtime/observe/trace.h"

namespace lockstep {

namespace {

// One layer's forward or backward pass under --trace and Nsight: on the host (no GpuTrace) a
// TraceSpan; on a device, the host only enqueues, so the span is the device-timed one of its
// kernels on the stream, and the host keeps only the NVTX range.
class LayerSpan {
 public:
  LayerSpan(GpuTrace* gpu, const char* kind, const char* category, int index) : gpu_(gpu) {
    if (gpu_ == nullptr) {
      host_.emplace(kind, category, index);
      return;
    }
    nvtx_ = nvtx_enabled();
    if (nvtx_) nvtx_push((kind + std::to_string(index)).c_str(), category);
    gpu_->begin_span(kind, category, index);
  }
  ~LayerSpan() {
    close_device();
    if (nvtx_) nvtx_pop();
  }
  // Ends the device span at this point of the stream (the host span runs to the scope's end).
  void close_device() {
    if (gpu_ != nullptr) gpu_->end();
    gpu_ = nullptr;
  }
  LayerSpan(const LayerSpan&) = delete;
  LayerSpan& operator=(const LayerSpan&) = delete;

 private:
  GpuTrace* gpu_;
  std::optional<TraceSpan> host_;
  bool nvtx_ = false;
};

// relu then maxpool equals maxpool then relu (max and relu commute), and so do their gradients:
// the window's maximum is where the gradient goes either way, and it is blocked when that maximum
// is not positive. Pooling first runs the ReLU over a quarter of the values (maxpool2) and saves
// a full-size pass forward and backward.
std::vector<LayerPlan> pool_before_relu(std::vector<LayerPlan> plan) {
  for (size_t i = 0; i + 1 < plan.size(); ++i) {
    if (plan[i].spec.type != "relu" || plan[i + 1].spec.type != "maxpool")
      continue;
    LayerPlan pool = plan[i + 1], relu = plan[i];
    pool.in = relu.in;
    relu.in = relu.out = pool.out;
    plan[i] = pool;
    plan[i + 1] = relu;
    ++i;
  }
  return plan;
}

// On the CPU a convolution directly followed by a ReLU runs the ReLU itself (conv.cpp: a oneDNN
// post-op, no extra pass over its output), and the ReLU layer becomes a PassThroughLayer: its
// output is its input, and the convolution masks the gradient. (A ReLU before a max-pool has moved
// after it by then, where it runs on a quarter of the values: cheaper than fusing it.)
void fuse_conv_relu(std::vector<LayerPlan>& plan) {
  for (size_t i = 0; i + 1 < plan.size(); ++i)
    if (plan[i].spec.type == "conv" && plan[i + 1].spec.type == "relu") plan[i].fused_relu = true;
}

// A max-pool on blocked activations directly followed by a ReLU applies it as it writes each
// window's maximum (and passes no gradient where the result is 0): one pass over its output less
// forward and backward (the CNN's two ReLUs, 0.42 ms of a 10.5 ms step at batch 64 a rank).
void fuse_pool_relu(std::vector<LayerPlan>& plan) {
  for (size_t i = 0; i + 1 < plan.size(); ++i)
    if (plan[i].spec.type == "maxpool" && plan[i].in_blocked16 && plan[i + 1].spec.type == "relu")
      plan[i].fused_relu = true;
}

// On AVX-512 a first convolution over one input channel and the max-pool after it run as one
// kernel (kernels/conv_pool.h: the convolution's full-resolution output, 64 x 28x28x32 floats a
// rank-step in the CNN, is never written), the pool's fused ReLU with them.
void fuse_first_conv_pool(std::vector<LayerPlan>& plan) {
  if (plan.size() < 2 || !kernels::conv_pool_fast()) return;
  LayerPlan& conv = plan[0];
  const LayerPlan& pool = plan[1];
  if (conv.spec.type != "conv" || pool.spec.type != "maxpool" || conv.fused_relu) return;
  const int k = pool.spec.args[0];
  if (!kernels::conv_pool_supported(conv2d_cpu_shape(conv, 1), k)) return;
  conv.fused_pool_k = k;
  conv.fused_pool_relu = pool.fused_relu;
  conv.out_blocked16 = pool.out_blocked16;
}

// On the CPU the activations between convolutions and max-pools (ReLUs between them included)
// stay in oneDNN's 16-channel blocks where oneDNN's convolutions choose that layout themselves
// (AVX-512, channels a multiple of 16; a one-channel first layer's output too): the max-pools read
// and write it, ReLUs do not care, and every reorder to and from NHWC is spared (the first
// convolution's two were 0.47 + 0.72 ms of a 13.7 ms step at batch 64 a rank, AVX-512 VM,
// 2026-11-26). With blocked activations on both sides oneDNN may also take Winograd for a 3x3
// convolution (conv2d.h). Each hand-off is checked at batch 1 and the largest, from the first
// layer on, so a convolution is checked with the layouts of its input already settled.
bool hands_on_blocked16(const LayerPlan& from, int max_batch) {
  if (from.spec.type == "maxpool") return from.in_blocked16;
  return from.spec.type == "conv" && conv2d_keeps_blocked16(from, max_batch);
}
bool takes_blocked16(const LayerPlan& to, int max_batch) {
  if (to.spec.type == "maxpool") return to.in[2] % 16 == 0;
  return to.spec.type == "conv" && conv2d_keeps_blocked16(to, max_batch);
}

void keep_activations_blocked(std::vector<LayerPlan>& plan, int max_batch) {
  if (!kernels::onednn_built()) return;
  for (size_t i = 0; i + 1 < plan.size(); ++i) {
    size_t next = i + 1;  // the next layer that is not a ReLU
    while (next < plan.size() && plan[next].spec.type == "relu") ++next;
    if (next == plan.size()) return;
    LayerPlan& from = plan[i];
    LayerPlan& to = plan[next];
    from.out_blocked16 = to.in_blocked16 = true;
    if (hands_on_blocked16(from, max_batch) && takes_blocked16(to, max_batch)) {
      for (size_t r = i + 1; r < next; ++r) plan[r].in_blocked16 = plan[r].out_blocked16 = true;
    } else {
      from.out_blocked16 = to.in_blocked16 = false;
    }
    i = next - 1;
  }
}

}  // namespace

Model::Model(const ModelSpec& spec, const SampleShape& input, int outputs, int max_batch,
             const ModelPlacement& placement, int positions)
    : placement_(placement),
      plan_(pool_before_relu(plan_model(spec, input, outputs, positions))),
      max_batch_(max_batch),
      outputs_(outputs * positions),
      positions_(positions),
      input_size_(shape_size(input)) {
  if (max_batch <= 0) throw UsageError("model batch size must be positive");
  const DeviceKind where = placement_.device;
  if (where == DeviceKind::cuda) check_cuda_layers(plan_);
  if (where == DeviceKind::cpu) {
    fuse_conv_relu(plan_);
    if (placement_.cpu_kernels == CpuKernels::best) {
      keep_activations_blocked(plan_, max_batch);
      fuse_pool_relu(plan_);
      fuse_first_conv_pool(plan_);
    }
  }
  size_t total = 0;
  for (size_t i = 0; i < plan_.size(); ++i) {
    if (i > 0 && (plan_[i - 1].fused_relu || plan_[i - 1].fused_pool_k > 0))
      layers_.push_back(std::make_unique<PassThroughLayer>(plan_[i]));
    else
      layers_.push_back(where == DeviceKind::cuda
                            ? make_cuda_layer(plan_[i], {placement_.stream, placement_.precision, placement_.graphs})
                            : make_cpu_layer(plan_[i], placement_.cpu_kernels));
    span_names_.push_back(find_layer_type(plan_[i].spec.type).span());
    if (plan_[i].params == 0) continue;
    total = (total + kParamAlignFloats - 1) / kParamAlignFloats * kParamAlignFloats;
    ranges_.push_back({total, plan_[i].params, static_cast<int>(i)});
    total += plan_[i].params;
    trainable_ += plan_[i].params;
  }
  params_ = Buffer<float>(where, total);
  grads_ = Buffer<float>(where, total);
  for (const ParamRange& r : ranges_)
    layers_[r.layer]->bind(params_.data() + r.offset, grads_.data() + r.offset);
  for (size_t i = 0; i < plan_.size(); ++i) {
    if (plan_[i].tied < 0) continue;
    for (const ParamRange& r : ranges_)
      if (r.layer == plan_[i].tied)
        layers_[i]->bind_tied(params_.data() + r.offset, grads_.data() + r.offset);
  }

  while (first_compute_ < layers_.size() && layers_[first_compute_]->is_view()) ++first_compute_;
  size_t workspace = 0, dmax = 0;
  activations_.resize(layers_.size());
  for (size_t i = 0; i < layers_.size(); ++i) {
    Layer& l = *layers_[i];
    l.reserve(max_batch);
    if (l.is_view()) continue;
    size_t batch = static_cast<size_t>(max_batch);
    activations_[i] = Buffer<float>(where, batch * l.out_size());
    workspace = std::max(workspace, l.workspace_floats(max_batch));
    if (i > first_compute_) dmax = std::max(dmax, batch * l.in_size());
  }
  workspace_ = Buffer<float>(where, workspace);
  dbuf_[0] = Buffer<float>(where, dmax);
  dbuf_[1] = Buffer<float>(where, dmax);
  output_grad_ = Buffer<float>(where, static_cast<size_t>(max_batch) * outputs_);
  act_.assign(layers_.size() + 1, nullptr);
}

Model::~Model() = default;

void Model::init_params(uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::vector<float> host(params_.size());
  for (const ParamRange& r : ranges_) init_layer_params(plan_[r.layer], host.data() + r.offset, gen);
  params_.write(host.data(), 0, host.size());
}

void Model::zero_grads() {
  if (placement_.device == DeviceKind::cuda)
    kernels::cuda_zero(grads_.data(), grads_.size() * sizeof(float), placement_.stream);
  else
    std::fill(grads_.data(), grads_.data() + grads_.size(), 0.0f);
}

const float* Model::forward(const float* x, int batch) {
  if (batch <= 0 || batch > max_batch_)
    throw Error("Model::forward: batch " + std::to_string(batch) + " outside [1, " +
                std::to_string(max_batch_) + "]");
  act_[0] = x;
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (layers_[i]->is_view()) {
      act_[i + 1] = act_[i];
      continue;
    }
    float* y = activations_[i].data();
    LayerSpan span(placement_.trace, span_names_[i].c_str(), "forward",
                   static_cast<int>(i));
    layers_[i]->forward(batch, act_[i], y, workspace_.data());
    act_[i + 1] = y;
  }
  return act_.back();
}

void Model::backward(int batch, const std::function<void(int layer)>& layer_done) {
  const float* dy = output_grad_.data();
  int next = 0;
  for (size_t i = layers_.size(); i-- > 0;) {
    Layer& l = *layers_[i];
    if (l.is_view()) continue;  // the gradient passes through unchanged
    float* dx = nullptr;
    if (i > first_compute_) {
      dx = dbuf_[next].data();
      next ^= 1;
    }
    LayerSpan span(placement_.trace, span_names_[i].c_str(), "backward",
                   static_cast<int>(i));
    l.backward(batch, act_[i], act_[i + 1], dy, dx, workspace_.data());
    span.close_device();  // what layer_done starts (a reduction, its staging) is not the layer's
    dy = dx;
    if (layer_done) layer_done(static_cast<int>(i));
  }
}

std::vector<size_t> Model::layer_spans() const {
  std::vector<size_t> spans(plan_.size(), 0);
  for (size_t r = 0; r < ranges_.size(); ++r) {
    const size_t end = r + 1 < ranges_.size() ? ranges_[r + 1].offset : params_.size();
    spans[static_cast<size_t>(ranges_[r].layer)] = end - ranges_[r].offset;
  }
  return spans;
}

std::vector<ParamTensorInfo> Model::param_tensors() const {
  std::vector<ParamTensorInfo> out;
  for (const ParamRange& r : ranges_) {
    const LayerPlan& p = plan_[r.layer];
    const LayerType& type = find_layer_type(p.spec.type);
    const std::string base = type.name + std::to_string(r.layer);
    size_t offset = r.offset;
    for (LayerTensor& t : type.tensors(p)) {
      size_t count = 1;
      for (int64_t d : t.shape) count *= static_cast<size_t>(d);
      out.push_back({base + "." + t.name, std::move(t.shape), offset, count});
      offset += count;
    }
    if (offset != r.offset + r.count)
      throw std::logic_error("the '" + type.name + "' layer type's tensors cover " +
                             std::to_string(offset - r.offset) + " of its " +
                             std::to_string(r.count) + " parameters");
  }
  return out;
}

std::string Model::summary() const {
  std::ostringstream os;
  for (const LayerPlan& p : plan_) {
    os << "  " << to_string(p.spec) << " " << to_string(p.in) << " -> " << to_string(p.out);
    if (p.params) os << ", " << p.params << " params";
    os << "\n";
  }
  os << "  total " << trainable_ << " parameters";
  return os.str();
}

}  // namespace lockstep
