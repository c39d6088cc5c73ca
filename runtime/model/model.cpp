#include "runtime/model/model.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "kernels/cast.h"
#include "kernels/cuda/memory.h"
#include "kernels/step/thread_lanes.h"
#include "runtime/base/error.h"
#include "runtime/model/cpu_plan.h"
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

// Binds `layers` (one lane's, or the model's own) to `params` and to the gradients at(offset) of
// each range, and a tied layer to its target's.
void bind_layers(const std::vector<std::unique_ptr<Layer>>& layers,
                 const std::vector<LayerPlan>& plan, const std::vector<ParamRange>& ranges,
                 float* params, const std::function<float*(size_t offset)>& at) {
  for (const ParamRange& r : ranges) layers[r.layer]->bind(params + r.offset, at(r.offset));
  for (size_t i = 0; i < plan.size(); ++i) {
    if (plan[i].tied < 0) continue;
    for (const ParamRange& r : ranges)
      if (r.layer == plan[i].tied) layers[i]->bind_tied(params + r.offset, at(r.offset));
  }
}

// Floats per sample of what a layer writes: its own output, or that of the last layer it runs in
// its kernel (LayerPlan::fused_next: a convolution's max-pool), and so of its incoming gradient.
size_t written_floats(const Layer& layer) {
  const LayerPlan& p = layer.plan();
  return p.fused_next.empty() ? layer.out_size() : shape_size(p.fused_next.back().out);
}

}  // namespace

// A lane beyond the first: layers of its own (the same plan, bound to the same parameters), their
// scratch, and a gradient buffer in the flat layout that its backward passes add to.
struct Model::Lane {
  std::vector<std::unique_ptr<Layer>> layers;
  Buffer<float> workspace, grads;
};

Model::Model(const ModelSpec& spec, const SampleShape& input, int outputs, int max_batch,
             const ModelPlacement& placement, int positions)
    : placement_(placement),
      plan_(commute_activations(plan_model(spec, input, outputs, positions))),
      max_batch_(max_batch),
      outputs_(outputs * positions),
      positions_(positions),
      input_size_(shape_size(input)) {
  if (max_batch <= 0) throw UsageError("model batch size must be positive");
  const DeviceKind where = placement_.device;
  const bool keeps16 = where == DeviceKind::cuda && placement_.precision == Precision::bf16 &&
                       placement_.bf16_params;
  if (where == DeviceKind::cuda) {
    check_cuda_layers(plan_);
    plan_cuda(plan_, placement_.knobs.cuda_conv_pool == ConvPoolKnob::fused);
  }
  if (where == DeviceKind::cpu) plan_cpu(plan_, max_batch, placement_.cpu_kernels);
  for (LayerPlan& p : plan_) p.recompute = placement_.recompute;
  // Layer ranges start at multiples of `align`: 256 bytes, times the ranks when sharded (ZeRO),
  // so that every bucket (whole layers) divides into the ranks' equal blocks of whole cache lines.
  const size_t align = kParamAlignFloats * static_cast<size_t>(std::max(placement_.shard_ranks, 1));
  size_t total = 0;
  for (size_t i = 0; i < plan_.size(); ++i) {
    if (plan_[i].absorbed)  // an earlier layer does its work (cpu_plan.h)
      layers_.push_back(std::make_unique<PassThroughLayer>(plan_[i]));
    else
      layers_.push_back(where == DeviceKind::cuda
                            ? make_cuda_layer(plan_[i], {placement_.stream, placement_.precision,
                                                         placement_.graphs, placement_.knobs,
                                                         keeps16 ? &bf16_params_ : nullptr})
                            : make_cpu_layer(plan_[i], placement_.cpu_kernels));
    span_names_.push_back(find_layer_type(plan_[i].spec.type).span());
    if (plan_[i].params == 0) continue;
    total = (total + align - 1) / align * align;
    ranges_.push_back({total, plan_[i].params, static_cast<int>(i)});
    total += plan_[i].params;
    trainable_ += plan_[i].params;
  }
  // Sharded: the end too, so that the last layer's span divides by the ranks like the others.
  if (placement_.shard_ranks > 1) total = (total + align - 1) / align * align;
  params_ = Buffer<float>(where, total);
  if (keeps16) {
    params16_ = Buffer<uint16_t>(where, total);
    bf16_params_ = {params_.data(), params16_.data()};
  }
  if (placement_.own_gradients) grads_ = Buffer<float>(where, total);
  bind_gradients(
      [this](size_t offset) { return grads_.empty() ? nullptr : grads_.data() + offset; });

  // Lanes (ModelPlacement::lanes): all that were asked for or none, so that no thread of the
  // rank idles: none where the batch has fewer rows than lanes, or where the other lanes' gradient
  // buffers would pass kLaneGradientBytes; none on CUDA, nor with OpenBLAS's kernels, whose own
  // threads the lanes' would contend with, nor without gradients of the model's own (ZeRO 2). Each
  // lane has at most ceil(max_batch / lanes) rows, the first (the layers here) too.
  int lanes = std::max(placement_.lanes, 1);
  const size_t lane_bytes = static_cast<size_t>(lanes - 1) * total * sizeof(float);
  if (where != DeviceKind::cpu || placement_.cpu_kernels != CpuKernels::best ||
      !placement_.own_gradients || lanes > max_batch || lane_bytes > kLaneGradientBytes)
    lanes = 1;
  const int lane_rows = (max_batch + lanes - 1) / lanes;

  while (first_compute_ < layers_.size() && layers_[first_compute_]->is_view()) ++first_compute_;
  size_t workspace = 0, dmax = 0;
  activations_.resize(layers_.size());
  for (size_t i = 0; i < layers_.size(); ++i) {
    Layer& l = *layers_[i];
    l.reserve(lane_rows);
    if (l.is_view()) continue;
    size_t batch = static_cast<size_t>(max_batch);
    activations_[i] = Buffer<float>(where, batch * l.out_size());
    workspace = std::max(workspace, l.workspace_floats(lane_rows));
    if (i > first_compute_) dmax = std::max(dmax, batch * l.in_size());
  }
  workspace_ = Buffer<float>(where, workspace);
  dbuf_[0] = Buffer<float>(where, dmax);
  dbuf_[1] = Buffer<float>(where, dmax);
  output_grad_ = Buffer<float>(where, static_cast<size_t>(max_batch) * outputs_);
  act_.assign(layers_.size() + 1, nullptr);
  // The backward pass's layers that compute, last first: the gradient each reads (the output's,
  // then the layer after it's dx) and its own dx, alternating between dbuf_[0] and [1] (none for
  // the first that computes; views pass the gradient through unchanged).
  const float* dy = output_grad_.data();
  for (size_t i = layers_.size(); i-- > 0;) {
    if (layers_[i]->is_view()) continue;
    float* dx = i > first_compute_ ? dbuf_[backward_steps_.size() % 2].data() : nullptr;
    int range = -1;
    for (size_t k = 0; k < ranges_.size(); ++k)
      if (ranges_[k].layer == static_cast<int>(i)) range = static_cast<int>(k);
    backward_steps_.push_back({i, dy, dx, range});
    dy = dx;
  }
  for (int l = 1; l < lanes; ++l) {
    auto lane = std::make_unique<Lane>();
    size_t lane_workspace = 0;
    for (size_t i = 0; i < plan_.size(); ++i) {
      lane->layers.push_back(plan_[i].absorbed ? std::make_unique<PassThroughLayer>(plan_[i])
                                               : make_cpu_layer(plan_[i], placement_.cpu_kernels));
      lane->layers.back()->reserve(lane_rows);
      if (!lane->layers.back()->is_view())
        lane_workspace = std::max(lane_workspace, lane->layers.back()->workspace_floats(lane_rows));
    }
    lane->workspace = Buffer<float>(where, lane_workspace);
    lane->grads = Buffer<float>(where, total);
    float* grads = lane->grads.data();
    bind_layers(lane->layers, plan_, ranges_, params_.data(),
                [grads](size_t offset) { return grads + offset; });
    lanes_.push_back(std::move(lane));
  }
}

Model::~Model() = default;

void Model::init_params(uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::vector<float> host(params_.size());
  for (const ParamRange& r : ranges_)
    init_layer_params(plan_[r.layer], host.data() + r.offset, gen);
  write_params(0, host.data(), host.size());
}

void Model::write_params(size_t offset, const float* host, size_t count) {
  params_.write(host, offset, count);
  if (params16_.empty() || count == 0) return;
  // The copy's words from the device's values, as the layers would cast them; waited for, as the
  // write itself is.
  kernels::cast_f32_to_bf16_cuda(params_.data() + offset, params16_.data() + offset, count,
                                 placement_.stream);
  kernels::cuda_stream_synchronize(placement_.stream);
}

void Model::bind_gradients(const std::function<float*(size_t offset)>& at) {
  bind_layers(layers_, plan_, ranges_, params_.data(), at);
  grad_views_.clear();
  for (const ParamRange& r : ranges_) grad_views_.push_back(at(r.offset));
}

void Model::zero_grads() {
  if (grads_.empty()) return;
  if (placement_.device == DeviceKind::cuda)
    kernels::cuda_zero(grads_.data(), grads_.size() * sizeof(float), placement_.stream);
  else
    std::fill(grads_.data(), grads_.data() + grads_.size(), 0.0f);
}

bool Model::bf16_output_supported() const {
  return !layers_.empty() && !layers_.back()->is_view() && layers_.back()->bf16_output_supported();
}

const float* Model::forward(const float* x, int batch, bool bf16_ok) {
  if (batch <= 0 || batch > max_batch_)
    throw Error("Model::forward: batch " + std::to_string(batch) + " outside [1, " +
                std::to_string(max_batch_) + "]");
  output_bf16_ =
      bf16_ok && placement_.knobs.cuda_logits == LogitsKnob::bf16 && bf16_output_supported();
  if (bf16_output_supported()) layers_.back()->set_bf16_output(output_bf16_);
  act_[0] = x;
  for (size_t i = 0; i < layers_.size(); ++i)
    act_[i + 1] = layers_[i]->is_view() ? act_[i] : activations_[i].data();
  last_lanes_ = lanes_for(batch);
  if (last_lanes_ > 1) {
    forward_lanes(batch, last_lanes_);
    return act_.back();
  }
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (layers_[i]->is_view()) continue;
    LayerSpan span(placement_.trace, span_names_[i].c_str(), "forward", static_cast<int>(i));
    forward_rows(*layers_[i], i, 0, batch, workspace_.data());
  }
  return act_.back();
}

void Model::backward(int batch, const std::function<void(int layer)>& layer_done) {
  if (last_lanes_ > 1) {
    backward_lanes(batch, last_lanes_, layer_done);
    return;
  }
  for (const BackwardStep& b : backward_steps_) {
    LayerSpan span(placement_.trace, span_names_[b.layer].c_str(), "backward",
                   static_cast<int>(b.layer));
    backward_rows(*layers_[b.layer], b.layer, 0, batch, b.dy, b.dx, workspace_.data());
    span.close_device();  // what layer_done starts (a reduction, its staging) is not the layer's
    if (layer_done) layer_done(static_cast<int>(b.layer));
  }
}

int Model::lanes_for(int batch) const { return std::min(lanes(), batch); }

void Model::forward_rows(Layer& layer, size_t i, int first, int rows, float* workspace) {
  const size_t row = static_cast<size_t>(first);
  layer.forward(rows, act_[i] + row * layer.in_size(),
                activations_[i].data() + row * written_floats(layer), workspace);
}

void Model::backward_rows(Layer& layer, size_t i, int first, int rows, const float* dy, float* dx,
                          float* workspace) {
  const size_t row = static_cast<size_t>(first), in = layer.in_size(), out = written_floats(layer);
  layer.backward(rows, act_[i] + row * in, act_[i + 1] + row * out, dy + row * out,
                 dx == nullptr ? nullptr : dx + row * in, workspace);
}

Layer& Model::lane_layer(int lane, size_t i) {
  return lane == 0 ? *layers_[i] : *lanes_[static_cast<size_t>(lane - 1)]->layers[i];
}

float* Model::lane_workspace(int lane) {
  return lane == 0 ? workspace_.data() : lanes_[static_cast<size_t>(lane - 1)]->workspace.data();
}

// Lane l takes rows [l batch / lanes, (l + 1) batch / lanes); lane 0 is the calling thread's and
// the only one traced.
void Model::forward_lanes(int batch, int lanes) {
  kernels::run_lanes(lanes, 1, [&](int lane, int) {
    const int first = lane * batch / lanes, rows = (lane + 1) * batch / lanes - first;
    for (size_t i = 0; i < layers_.size(); ++i) {
      if (layers_[i]->is_view()) continue;
      std::optional<TraceSpan> span;
      if (lane == 0) span.emplace(span_names_[i].c_str(), "forward", static_cast<int>(i));
      forward_rows(lane_layer(lane, i), i, first, rows, lane_workspace(lane));
    }
  });
}

// A round per step of backward_steps_: every lane's backward pass of the layer over its rows (the
// first lane's gradients into grads(), the others' into their own buffers, zeroed as the pass
// starts); then the layer's range of the other lanes' buffers added into grads(), the range split
// over the threads, each float summed in lane order; then layer_done on the calling thread while
// the lanes go on with the next layer. A tied layer's gradients land in its target's range, added
// when the target's round comes (it is an earlier layer: model_spec.cpp).
void Model::backward_lanes(int batch, int lanes, const std::function<void(int layer)>& layer_done) {
  kernels::run_lanes(
      lanes, static_cast<int>(backward_steps_.size()),
      [&](int lane, int k) {
        const BackwardStep& b = backward_steps_[static_cast<size_t>(k)];
        const int first = lane * batch / lanes, rows = (lane + 1) * batch / lanes - first;
        std::optional<TraceSpan> span;
        if (lane == 0)
          span.emplace(span_names_[b.layer].c_str(), "backward", static_cast<int>(b.layer));
        Buffer<float>* own = lane == 0 ? nullptr : &lanes_[static_cast<size_t>(lane - 1)]->grads;
        if (own != nullptr && k == 0) std::fill(own->data(), own->data() + own->size(), 0.0f);
        backward_rows(lane_layer(lane, b.layer), b.layer, first, rows, b.dy, b.dx,
                      lane_workspace(lane));
      },
      [&](int k, int part, int parts) {
        const BackwardStep& b = backward_steps_[static_cast<size_t>(k)];
        if (b.range < 0) return;
        const ParamRange& r = ranges_[static_cast<size_t>(b.range)];
        float* into = grad_views_[static_cast<size_t>(b.range)];
        const size_t begin = r.count * part / parts, end = r.count * (part + 1) / parts;
        for (int lane = 1; lane < lanes; ++lane) {
          const float* from = lanes_[static_cast<size_t>(lane - 1)]->grads.data() + r.offset;
          for (size_t j = begin; j < end; ++j) into[j] += from[j];
        }
      },
      [&](int k) {
        if (layer_done) layer_done(static_cast<int>(backward_steps_[static_cast<size_t>(k)].layer));
      });
}

std::vector<size_t> Model::layer_spans() const {
  std::vector<size_t> spans(plan_.size(), 0);
  for (size_t r = 0; r < ranges_.size(); ++r) {
    const size_t end = r + 1 < ranges_.size() ? ranges_[r + 1].offset : params_.size();
    spans[static_cast<size_t>(ranges_[r].layer)] = end - ranges_[r].offset;
  }
  return spans;
}

std::vector<int> Model::tie_targets() const {
  std::vector<int> out;
  for (const LayerPlan& p : plan_)
    if (p.tied >= 0 && std::find(out.begin(), out.end(), p.tied) == out.end())
      out.push_back(p.tied);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<ParamTensorInfo> planned_param_tensors(const std::vector<LayerPlan>& plan,
                                                   const std::vector<size_t>* layer_offsets) {
  std::vector<ParamTensorInfo> out;
  for (size_t i = 0; i < plan.size(); ++i) {
    const LayerPlan& p = plan[i];
    if (p.params == 0) continue;
    const LayerType& type = find_layer_type(p.spec.type);
    const std::string base = type.name + std::to_string(i);
    const size_t start = layer_offsets != nullptr ? (*layer_offsets)[i] : 0;
    size_t offset = start;
    for (LayerTensor& t : type.tensors(p)) {
      size_t count = 1;
      for (int64_t d : t.shape) count *= static_cast<size_t>(d);
      out.push_back({base + "." + t.name, std::move(t.shape), offset, count});
      offset += count;
    }
    if (offset != start + p.params)
      throw std::logic_error("the '" + type.name + "' layer type's tensors cover " +
                             std::to_string(offset - start) + " of its " +
                             std::to_string(p.params) + " parameters");
  }
  return out;
}

std::vector<ParamTensorInfo> Model::param_tensors() const {
  std::vector<size_t> offsets(plan_.size(), 0);
  for (const ParamRange& r : ranges_) offsets[static_cast<size_t>(r.layer)] = r.offset;
  return planned_param_tensors(plan_, &offsets);
}

std::string Model::summary() const {
  std::ostringstream os;
  for (size_t i = 0; i < plan_.size(); ++i) {
    const LayerPlan& p = plan_[i];
    os << "  " << to_string(p.spec) << " " << to_string(p.in) << " -> " << to_string(p.out);
    if (p.params) os << ", " << p.params << " params";
    if (p.commuted && i > 0)
      os << " (written before " << to_string(plan_[i - 1].spec)
         << ", run after it: the same values, fewer of them)";
    os << "\n";
  }
  os << "  total " << trainable_ << " parameters";
  return os.str();
}

}  // namespace lockstep
