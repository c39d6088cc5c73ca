#include "runtime/model/optimizer.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "kernels/cuda/memory.h"
#include "kernels/step/optimizer.h"
#include "runtime/base/error.h"
#include "runtime/model/model.h"

namespace lockstep {

const char* optimizer_name(OptimizerKind k) {
  switch (k) {
    case OptimizerKind::sgd: return "sgd";
    case OptimizerKind::momentum: return "momentum";
    case OptimizerKind::adam: return "adam";
    case OptimizerKind::adamw: return "adamw";
  }
  return "?";
}

OptimizerKind parse_optimizer(const std::string& text) {
  if (text == "sgd") return OptimizerKind::sgd;
  if (text == "momentum") return OptimizerKind::momentum;
  if (text == "adam") return OptimizerKind::adam;
  if (text == "adamw") return OptimizerKind::adamw;
  throw UsageError("--optimizer must be sgd, momentum, adam or adamw, not '" + text + "'");
}

void validate(const OptimizerConfig& c) {
  auto in_unit = [](float v) { return std::isfinite(v) && v >= 0.0f && v < 1.0f; };
  if (!in_unit(c.momentum))
    throw UsageError("--momentum must be in [0, 1), not " + std::to_string(c.momentum));
  if (!in_unit(c.beta1))
    throw UsageError("--beta1 must be in [0, 1), not " + std::to_string(c.beta1));
  if (!in_unit(c.beta2))
    throw UsageError("--beta2 must be in [0, 1), not " + std::to_string(c.beta2));
  if (!(std::isfinite(c.eps) && c.eps > 0.0f))
    throw UsageError("--eps must be positive, not " + std::to_string(c.eps));
  if (!(std::isfinite(c.weight_decay) && c.weight_decay >= 0.0f))
    throw UsageError("--weight-decay must be >= 0, not " + std::to_string(c.weight_decay));
}

ParamRanges matrix_ranges(const std::vector<ParamTensorInfo>& tensors) {
  ParamRanges out;
  for (const ParamTensorInfo& t : tensors)
    if (t.shape.size() >= 2) out.emplace_back(t.offset, t.count);
  return out;
}

Optimizer::Optimizer(const OptimizerConfig& config, size_t param_count, DeviceKind device,
                     cudaStream_t stream)
    : config_(config), n_(param_count), device_(device), stream_(stream) {
  validate(config_);
  switch (config_.kind) {
    case OptimizerKind::sgd: break;
    case OptimizerKind::momentum: a_ = Buffer<float>(device_, n_); break;
    case OptimizerKind::adam:
    case OptimizerKind::adamw:
      a_ = Buffer<float>(device_, n_);
      b_ = Buffer<float>(device_, n_);
      break;
  }
  pieces_ = {{0, n_, true}};
  whole_ = {{0, n_, true}};
  segments_ = {{0, 0, n_}};
  build_runs();
}

void Optimizer::set_segments(std::vector<Segment> segments, bool compact_grads,
                             bool compact_params) {
  if (params16_ != nullptr)
    throw std::logic_error("Optimizer::set_segments: a sharded optimizer writes no bf16 copy");
  sharded_ = true;
  compact_grads_ = compact_grads;
  compact_params_ = compact_params;
  size_t at = 0;
  for (const Segment& s : segments) {
    if (s.state != at)
      throw std::invalid_argument("Optimizer::set_segments: a segment starts at state offset " +
                                  std::to_string(s.state) + ", expected " + std::to_string(at));
    at += s.count;
  }
  if (at != n_)
    throw std::invalid_argument("Optimizer::set_segments: the segments cover " +
                                std::to_string(at) + " of " + std::to_string(n_) + " state values");
  segments_ = std::move(segments);
  build_runs();
}

void Optimizer::build_runs() {
  runs_.clear();
  for (const Segment& s : segments_)
    for (const Piece& p : update_pieces()) {
      const size_t begin = std::max(p.begin, s.state), end = std::min(p.end, s.state + s.count);
      if (begin < end) runs_.push_back({s.flat + (begin - s.state), begin, end - begin, p.decay});
    }
  if (runs_.empty())
    runs_.push_back({0, 0, 0, true});  // an empty buffer: one empty call, as before
}

Optimizer::~Optimizer() {
  if (captured_host_ != nullptr) kernels::cuda_host_free(captured_host_);
}

const std::vector<Optimizer::Piece>& Optimizer::update_pieces() const {
  // sgd, momentum, adam's L2 and an undecayed adamw are one pass; a decaying adamw is one pass per
  // piece (the elementwise update is the same on a piece as on the whole buffer).
  const bool split = config_.kind == OptimizerKind::adamw && config_.weight_decay != 0.0f;
  return split ? pieces_ : whole_;
}

void Optimizer::set_decay_ranges(const ParamRanges& ranges) {
  ParamRanges sorted;
  for (const auto& [offset, count] : ranges) {
    if (offset > n_ || count > n_ - offset)
      throw std::invalid_argument("Optimizer::set_decay_ranges: range [" + std::to_string(offset) +
                                  ", +" + std::to_string(count) + ") ends past the " +
                                  std::to_string(n_) + " parameters");
    if (count > 0) sorted.emplace_back(offset, offset + count);
  }
  std::sort(sorted.begin(), sorted.end());
  pieces_.clear();
  size_t at = 0;  // everything before `at` is covered
  for (const auto& [begin, end] : sorted) {
    if (!pieces_.empty() && pieces_.back().decay && begin <= at) {
      pieces_.back().end = std::max(pieces_.back().end, end);  // overlapping or adjacent: merge
    } else {
      if (begin > at) pieces_.push_back({at, begin, false});
      pieces_.push_back({begin, end, true});
    }
    at = pieces_.back().end;
  }
  if (at < n_ || pieces_.empty()) pieces_.push_back({at, n_, false});
  build_runs();
}

namespace {

kernels::SgdOptions sgd_options(const OptimizerConfig& c, float lr) {
  kernels::SgdOptions o;
  o.lr = lr;
  o.momentum = c.kind == OptimizerKind::momentum ? c.momentum : 0.0f;
  o.nesterov = c.nesterov;
  o.weight_decay = c.weight_decay;
  return o;
}

// Adam's options for update `step` of a piece that is decayed or not.
kernels::AdamOptions adam_options(const OptimizerConfig& c, float lr, int64_t step, bool decay) {
  kernels::AdamOptions o;
  o.lr = lr;
  o.beta1 = c.beta1;
  o.beta2 = c.beta2;
  o.eps = c.eps;
  o.decoupled = c.kind == OptimizerKind::adamw;
  o.step = step;
  o.weight_decay = decay ? c.weight_decay : 0.0f;
  return o;
}

}  // namespace

void Optimizer::set_params16(uint16_t* words) {
  if (words != nullptr && (device_ != DeviceKind::cuda || sharded_))
    throw std::logic_error(
        "Optimizer::set_params16: a bf16 copy is written by an unsharded device optimizer (ZeRO's "
        "other blocks arrive by all-gather)");
  params16_ = words;
}

void Optimizer::step(float* params, const float* grads, float lr) {
  ++steps_;
  for (const Run& r : runs_) {
    float* a = a_.empty() ? nullptr : a_.data() + r.state;
    const float* g = grads + (compact_grads_ ? r.state : r.flat);
    float* w = params + (compact_params_ ? r.state : r.flat);
    uint16_t* w16 = params16_ == nullptr ? nullptr : params16_ + r.flat;
    switch (config_.kind) {
      case OptimizerKind::sgd:
      case OptimizerKind::momentum: {
        const kernels::SgdOptions o = sgd_options(config_, lr);
        if (device_ == DeviceKind::cuda)
          kernels::sgd_update_cuda(o, w, g, a, r.count, stream_, w16);
        else
          kernels::sgd_update_cpu(o, w, g, a, r.count);
        break;
      }
      case OptimizerKind::adam:
      case OptimizerKind::adamw: {
        const kernels::AdamOptions o = adam_options(config_, lr, steps_, r.decay);
        if (device_ == DeviceKind::cuda)
          kernels::adam_update_cuda(o, w, g, a, b_.data() + r.state, r.count, stream_, w16);
        else
          kernels::adam_update_cpu(o, w, g, a, b_.data() + r.state, r.count);
        break;
      }
    }
  }
}

void Optimizer::set_captured_lr(float lr) {
  if (device_ != DeviceKind::cuda)
    throw std::logic_error("Optimizer::set_captured_lr: only a device optimizer is captured");
  const size_t bytes = runs_.size() * sizeof(kernels::UpdateCoefficients);
  if (captured_host_ == nullptr) {
    captured_host_ = kernels::cuda_host_alloc(bytes);
    captured_device_ = Buffer<unsigned char>(DeviceKind::cuda, bytes);
  }
  auto* c = static_cast<kernels::UpdateCoefficients*>(captured_host_);
  const bool adam = config_.kind == OptimizerKind::adam || config_.kind == OptimizerKind::adamw;
  for (size_t k = 0; k < runs_.size(); ++k)
    c[k] = adam ? kernels::adam_coefficients(adam_options(config_, lr, steps_ + 1, runs_[k].decay))
                : kernels::sgd_coefficients(sgd_options(config_, lr));
}

void Optimizer::step_captured(float* params, const float* grads, const double* gate, int gates) {
  if (captured_host_ == nullptr)
    throw std::logic_error("Optimizer::step_captured: set_captured_lr() first");
  kernels::cuda_copy_to_device_async(captured_device_.data(), captured_host_,
                                     captured_device_.size(), stream_);
  const auto* c = reinterpret_cast<const kernels::UpdateCoefficients*>(captured_device_.data());
  for (size_t k = 0; k < runs_.size(); ++k) {
    const Run& r = runs_[k];
    kernels::gated_update_cuda(c + k, gate, gates, params + (compact_params_ ? r.state : r.flat),
                               grads + (compact_grads_ ? r.state : r.flat),
                               a_.empty() ? nullptr : a_.data() + r.state,
                               b_.empty() ? nullptr : b_.data() + r.state, r.count, stream_,
                               params16_ == nullptr ? nullptr : params16_ + r.flat);
  }
}

std::vector<StateBuffer> Optimizer::state() {
  switch (config_.kind) {
    case OptimizerKind::sgd: return {};
    case OptimizerKind::momentum: return {{"velocity", &a_}};
    case OptimizerKind::adam:
    case OptimizerKind::adamw: return {{"adam_m", &a_}, {"adam_v", &b_}};
  }
  return {};
}

}  // namespace lockstep
