#include "runtime/train/step_guard.h"

#include <cmath>

#include "runtime/base/error.h"
#include "runtime/base/log.h"
#include "runtime/comm/agree.h"
#include "runtime/process/signals.h"
#include "runtime/train/checkpoint.h"

namespace lockstep {
namespace {

// A save may take longer than a collective on a slow shared file system: the derived checkpoint
// deadline grants this much time per byte on top of the collective timeout (10 MB/s).
constexpr double kSaveBytesPerSecond = 10e6;

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
    throw UsageError(
        "--checkpoint-timeout must be a number of seconds in [0, 86400] (0: derived "
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

Verdict StepGuard::check_update(bool grads_finite, int64_t step, int epoch) {
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
  if (!loss_bad && grads_finite) {
    skipped_in_a_row_ = 0;
    return Verdict::proceed;
  }
  std::string what = std::string(loss_bad ? "the loss" : "the averaged gradient") +
                     " is not finite (NaN or Inf) at step " + std::to_string(step + 1) +
                     " (epoch " + std::to_string(epoch + 1) + ")";
  if (options_.on_nan == NanPolicy::skip) {
    ++skipped_;
    // Steps skipped without end mean the parameters themselves are no longer finite (an update
    // that overflowed them): no later step can be applied, so the run stops rather than skip on.
    if (++skipped_in_a_row_ < kMaxSkippedInARow) {
      LS_LOG(warn) << what << ": step skipped (--on-nan skip), " << skipped_ << " skipped so far";
      return Verdict::skip;
    }
    what += ", the " + std::to_string(kMaxSkippedInARow) +
            "th step in a row skipped (--on-nan skip): the parameters are likely no longer finite "
            "(an update overflowed them), so no later step could be applied";
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
                     " (lower --lr, clip with --clip-norm" +
                     (options_.on_nan == NanPolicy::skip
                          ? std::string(")")
                          : ", check the data for NaN or infinite values, or use --on-nan skip)"));
  return Verdict::stop;  // not reached: a failed agreement throws
}

void StepGuard::saved(int64_t step, const std::string& path) {
  last_saved_step_ = step;
  last_checkpoint_ = path;
}

Verdict StepGuard::after_step(int64_t step, int64_t total_steps) {
  if (stopped()) {
    stopped_early_ = step < total_steps;
    return Verdict::stop;
  }
  if (keeps_checkpoints() && options_.checkpoint_every > 0 && step % options_.checkpoint_every == 0)
    return Verdict::save;
  return Verdict::proceed;
}

void StepGuard::report_stop(int64_t step) const {
  if (stopped_early_)
    LS_LOG(warn) << "stopped by " << signal_name(stop_signal_) << " after step " << step
                 << (keeps_checkpoints() ? "; continue with --resume " + options_.checkpoint_dir
                                         : std::string("; no checkpoint was written"));
  else
    LS_LOG(warn) << signal_name(stop_signal_) << " arrived during the last step (" << step
                 << "): training is complete";
}

Verdict StepGuard::at_end(int64_t step) {
  if (skipped_ > 0) {
    LS_LOG(warn) << skipped_ << " of " << step
                 << " steps were skipped for a non-finite loss or gradient (--on-nan skip)";
  }
  if (!keeps_checkpoints() || stopped_early_ || last_saved_step_ == step) return Verdict::proceed;
  return Verdict::save;
}

}  // namespace lockstep
