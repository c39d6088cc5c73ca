#include "runtime/model/optimizer.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "kernels/optimizer.h"
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
}

void Optimizer::step(float* params, const float* grads, float lr) {
  ++steps_;
  switch (config_.kind) {
    case OptimizerKind::sgd:
    case OptimizerKind::momentum: {
      kernels::SgdOptions o;
      o.lr = lr;
      o.momentum = config_.kind == OptimizerKind::momentum ? config_.momentum : 0.0f;
      o.nesterov = config_.nesterov;
      o.weight_decay = config_.weight_decay;
      float* velocity = a_.empty() ? nullptr : a_.data();
      if (device_ == DeviceKind::cuda)
        kernels::sgd_update_cuda(o, params, grads, velocity, n_, stream_);
      else
        kernels::sgd_update_cpu(o, params, grads, velocity, n_);
      break;
    }
    case OptimizerKind::adam:
    case OptimizerKind::adamw: {
      kernels::AdamOptions o;
      o.lr = lr;
      o.beta1 = config_.beta1;
      o.beta2 = config_.beta2;
      o.eps = config_.eps;
      o.decoupled = config_.kind == OptimizerKind::adamw;
      o.step = steps_;
      // adam's L2 and an undecayed adamw are one pass; a decaying adamw is one pass per piece
      // (the elementwise update is the same on a piece as on the whole buffer).
      const bool whole = !o.decoupled || config_.weight_decay == 0.0f;
      const std::vector<Piece> all{{0, n_, true}};
      for (const Piece& piece : whole ? all : pieces_) {
        o.weight_decay = piece.decay ? config_.weight_decay : 0.0f;
        const size_t at = piece.begin, len = piece.end - piece.begin;
        if (device_ == DeviceKind::cuda)
          kernels::adam_update_cuda(o, params + at, grads + at, a_.data() + at, b_.data() + at,
                                    len, stream_);
        else
          kernels::adam_update_cpu(o, params + at, grads + at, a_.data() + at, b_.data() + at, len);
      }
      break;
    }
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
