#include "runtime/step_guard.h"

#include <cmath>
#include <cstdio>
#include <cstring>

#include "runtime/agree.h"
#include "runtime/checkpoint.h"
#include "runtime/error.h"
#include "runtime/log.h"
#include "runtime/signals.h"
#include "runtime/trace.h"
#include "runtime/train_checkpoint.h"
#include "runtime/trainer.h"

namespace lockstep {
namespace {

// A save may take longer than a collective on a slow shared file system: the derived checkpoint
// deadline grants this much time per byte on top of the collective timeout (10 MB/s).
constexpr double kSaveBytesPerSecond = 10e6;

std::string seconds_text(Millis t) {
  char text[32];
  std::snprintf(text, sizeof text, "%g s", static_cast<double>(t.count()) / 1000.0);
  return text;
}

// NaN and Inf are the floats whose exponent bits are all ones. An OR over integer tests
// vectorises, unlike a float reduction.
bool all_finite(const float* x, size_t n) {
  constexpr uint32_t kExponent = 0x7f800000u;
  uint32_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, x + i, sizeof(bits));
    bad |= static_cast<uint32_t>((bits & kExponent) == kExponent);
  }
  return bad == 0;
}

}  // namespace

NanPolicy parse_nan_policy(const std::string& text) {
  if (text == "stop") return NanPolicy::stop;
  if (text == "skip") return NanPolicy::skip;
  throw UsageError("--on-nan must be stop or skip, not '" + text + "'");
}

const char* nan_policy_name(NanPolicy p) { return p == NanPolicy::stop ? "stop" : "skip"; }

void validate(const GuardOptions& o) {
  if (o.checkpoint_every < 0)
    throw UsageError("--checkpoint-every must be >= 0, not " + std::to_string(o.checkpoint_every));
  if (o.keep_checkpoints < 0)
    throw UsageError("--keep-checkpoints must be >= 0 (0 keeps all), not " +
                     std::to_string(o.keep_checkpoints));
  if (!(o.checkpoint_timeout >= 0 && o.checkpoint_timeout <= 86400))
    throw UsageError("--checkpoint-timeout must be a number of seconds in [0, 86400] (0: derived "
                     "from --timeout and the checkpoint's size), not " +
                     std::to_string(o.checkpoint_timeout));
  if (o.checkpoint_every > 0 && o.checkpoint_dir.empty())
    throw UsageError("--checkpoint-every needs --checkpoint-dir (where to write them)");
}

Millis checkpoint_deadline(const GuardOptions& o, Millis collective_timeout,
                           uint64_t checkpoint_bytes) {
  if (o.checkpoint_timeout > 0) return Millis(static_cast<int64_t>(o.checkpoint_timeout * 1000));
  return collective_timeout +
         Millis(static_cast<int64_t>(1000.0 * static_cast<double>(checkpoint_bytes) /
                                     kSaveBytesPerSecond));
}

StepGuard::StepGuard(Communicator& comm, const GuardOptions& options)
    : comm_(comm), options_(options) {
  require_host_buffers(comm_, "the step guard");
  install_stop_handlers();
}

void StepGuard::before_reduce(double local_loss_sum) {
  flags_[0] = lockstep::stop_signal();
  flags_[1] = std::isfinite(local_loss_sum) ? 0 : 1;
  pending_ = comm_.all_reduce_async(flags_, flags_, 2, DType::i32, ReduceOp::max);
}

bool StepGuard::update_ok(const float* grads, size_t count, int64_t step, int epoch) {
  return update_ok(all_finite(grads, count), step, epoch);
}

bool StepGuard::update_ok(bool grads_finite, int64_t step, int epoch) {
  if (pending_) {
    pending_->wait(comm_.timeout());
    pending_.reset();
  }
  if (flags_[0] != 0 && stop_signal_ == 0) {
    stop_signal_ = flags_[0];
    LS_LOG(warn) << signal_name(stop_signal_) << " received: finishing step " << step + 1
                 << (options_.checkpoint_dir.empty() ? ", then stopping (no --checkpoint-dir: "
                                                       "nothing will be saved)"
                                                     : ", writing a checkpoint, then stopping");
  }
  const bool loss_bad = flags_[1] != 0;
  if (!loss_bad && grads_finite) return true;
  const std::string what = std::string(loss_bad ? "the loss" : "the averaged gradient") +
                           " is not finite (NaN or Inf) at step " + std::to_string(step + 1) +
                           " (epoch " + std::to_string(epoch + 1) + ")";
  if (options_.on_nan == NanPolicy::skip) {
    ++skipped_;
    LS_LOG(warn) << what << ": step skipped (--on-nan skip), " << skipped_ << " skipped so far";
    return false;
  }
  std::string keep = last_checkpoint_;
  if (keep.empty() && !options_.checkpoint_dir.empty()) {
    std::vector<std::string> all = list_checkpoints(options_.checkpoint_dir);
    if (!all.empty()) keep = all.back();
  }
  // Every rank reached this verdict from the agreed flags; saying so through the agreement makes it
  // the AgreedUsageError that rank 0 alone prints (run_app).
  agree_or_throw(comm_, false,
                 what + ": training stopped, nothing was applied or saved from this step; " +
                     (keep.empty() ? std::string("there is no checkpoint to go back to")
                                   : "the last good checkpoint is " + keep) +
                     " (lower --lr, clip with --clip-norm, or use --on-nan skip)");
  return false;
}

std::string StepGuard::save(Trainer& trainer) {
  TraceSpan span("checkpoint", "checkpoint");
  const int64_t step = trainer.state().global_step;
  trainer.verify_replicas("before the checkpoint at step " + std::to_string(step));
  std::string path = checkpoint_file_name(options_.checkpoint_dir, step);
  if (comm_.rank() == 0) {
    path = save_checkpoint(options_.checkpoint_dir, capture_checkpoint(trainer, comm_.size()),
                           options_.keep_checkpoints);
    LS_LOG(info) << "checkpoint at step " << step << ": " << path;
  }
  const Millis deadline =
      checkpoint_deadline(options_, comm_.timeout(), checkpoint_bytes(trainer));
  try {
    comm_.barrier_async()->wait(deadline);
  } catch (const TimeoutError& e) {
    throw TimeoutError(std::string(e.what()) + " (waiting for rank 0 to write " + path +
                       "; the checkpoint deadline is " + seconds_text(deadline) +
                       ": --checkpoint-timeout sets it)");
  }
  last_saved_step_ = step;
  last_checkpoint_ = path;
  return path;
}

bool StepGuard::after_step(Trainer& trainer) {
  const int64_t step = trainer.state().global_step;
  const bool have_dir = !options_.checkpoint_dir.empty();
  if (stopped()) {
    if (have_dir) save(trainer);
    stopped_early_ = step < trainer.total_steps();
    if (stopped_early_)
      LS_LOG(warn) << "stopped by " << signal_name(stop_signal_) << " after step " << step
                   << (have_dir ? "; continue with --resume " + options_.checkpoint_dir
                                : std::string("; no checkpoint was written"));
    else
      LS_LOG(warn) << signal_name(stop_signal_) << " arrived during the last step (" << step
                   << "): training is complete";
    return true;
  }
  if (have_dir && options_.checkpoint_every > 0 && step % options_.checkpoint_every == 0)
    save(trainer);
  return false;
}

void StepGuard::at_end(Trainer& trainer) {
  if (skipped_ > 0) {
    LS_LOG(warn) << skipped_ << " of " << trainer.state().global_step
                 << " steps were skipped for a non-finite loss or gradient (--on-nan skip)";
  }
  if (options_.checkpoint_dir.empty() || stopped_early_) return;
  if (last_saved_step_ == trainer.state().global_step) return;
  save(trainer);
}

}  // namespace lockstep
