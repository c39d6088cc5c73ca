// Trainer (trainer.h): the memory a rank holds for training, in bytes and in words for the run
// header and lockstep-bench.
#include <cstdio>
#include <string>

#include "runtime/train/trainer.h"
#include "runtime/train/trainer_impl.h"

namespace lockstep {

Trainer::MemoryUse Trainer::memory_use() {
  MemoryUse u;
  u.params = model_->param_count() * sizeof(float);
  // Stage 2: the reducer's staging ring and this rank's blocks, in place of a whole buffer.
  u.grads = config_.zero == 2 ? impl_->reducer->gradient_floats() * sizeof(float) : u.params;
  u.lane_grads = static_cast<uint64_t>(model_->lanes() - 1) * u.params;  // model.h: lanes
  u.grads += u.lane_grads;
  const size_t state_floats = impl_->zero ? impl_->zero->owned() : model_->param_count();
  u.state = state_floats * sizeof(float) * optimizer_->state().size();
  if (impl_->zero && impl_->zero->rounds())  // the masters and the bf16 buffer gathered
    u.masters = impl_->zero->owned() * sizeof(float) + model_->param_count() * sizeof(uint16_t);
  if (model_->params16() != nullptr) u.copy16 = model_->param_count() * sizeof(uint16_t);
  return u;
}

std::string Trainer::memory_text() {
  const MemoryUse u = memory_use();
  auto mb = [](uint64_t b) {
    char t[32];
    std::snprintf(t, sizeof t, "%.2f MB", static_cast<double>(b) / 1e6);
    return std::string(t);
  };
  const std::string share = "this rank's 1/" + std::to_string(comm_.size());
  std::string text = "parameters " + mb(u.params) +
                     (u.masters > 0 ? " (fp32, rounded to bf16 by --zero's all-gather)"
                                    : " (fp32, the master weights)") +
                     ", gradients " + mb(u.grads);
  if (config_.zero == 2) text += " (a staging ring of two buckets and " + share + " of the sums)";
  if (u.lane_grads > 0)
    text += " (" + mb(u.lane_grads) + " of them kept by the other " +
            std::to_string(model_->lanes() - 1) +
            " lane(s): each thread runs the model over rows of its own)";
  text += ", optimizer state " + mb(u.state);
  if (impl_->zero) text += " (" + share + ", --zero " + std::to_string(config_.zero) + ")";
  if (u.masters > 0)
    text += ", master weights " + mb(u.masters) + " (fp32, " + share +
            ", and the bf16 copy of the parameters they are gathered as)";
  if (u.copy16 > 0)
    text += ", a bf16 copy of the parameters " + mb(u.copy16) + " (written by the update)";
  return text;
}

}  // namespace lockstep
