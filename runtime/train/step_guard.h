// StepGuard: what the training loop must do around each step to survive the outside world:
// periodic and final checkpoints, stop signals (SIGTERM, SIGINT, SIGUSR1), and non-finite losses
// or gradients. It decides and the Trainer acts: the guard returns a Verdict and knows nothing of
// the Trainer or of how a checkpoint is written (the Trainer writes it, train_checkpoint.h). The
// Trainer calls it at fixed points of every step, on every rank:
//
//   before_reduce(local loss)  before the gradient all-reduce: queues a 2-int all-reduce (max) of
//                              {stop signal seen here, local loss non-finite}. It is ordered just
//                              before the gradient all-reduce, so it costs one small message and
//                              no extra wait. A signal may reach ranks at different steps; after
//                              this reduction every rank knows whether any rank got one.
//   check_update(finite)       after the gradient all-reduce: proceed, or skip when the step must
//                              not be applied (--on-nan skip); UsageError naming the step
//                              (--on-nan stop, or kMaxSkippedInARow skipped steps in a row).
//                              Gradients are identical on every rank after the reduction, so every
//                              rank reaches the same verdict without talking.
//   after_step(step, total)    save every `checkpoint_every` steps; stop on an agreed stop signal
//                              (the trainer saves first when there is a checkpoint dir, then
//                              calls report_stop() and ends the loop after this step). A stop
//                              agreed on the run's last step is no early stop: training is
//                              complete, and stopped_early() stays false.
//   at_end(step)               save when the final checkpoint is still to be written.
// The trainer tells the guard of each checkpoint written (saved()), for the NaN message and the
// final save. Checkpoints are written by rank 0 after a replica check (never from diverged or
// non-finite parameters); every rank then waits at a barrier until the checkpoint deadline
// (checkpoint_deadline below: --checkpoint-timeout, by default --timeout plus 1 s per 10 MB of
// checkpoint), so a slow file system does not look like a dead peer while a stopped rank 0 still
// ends the job in bounded time; the timeout's message names the file and the option.
// Constructing a StepGuard installs the stop-signal handlers.
// Used by the training thread only.
// Collective: every rank calls its methods at the same points of every step, in the same
// order (before_reduce() queues an all-reduce).
#pragma once

#include <cstdint>
#include <string>

#include "runtime/base/communicator.h"

namespace lockstep {

// What the trainer does next; the same on every rank.
enum class Verdict {
  proceed,  // apply the update (check_update), go on (after_step, at_end)
  skip,     // leave this step's update out: its loss or gradient is not finite (--on-nan skip)
  save,     // write a checkpoint, then go on
  stop,     // write a checkpoint when keeps_checkpoints(), call report_stop(), end the run
};

enum class NanPolicy { stop, skip };
NanPolicy parse_nan_policy(const std::string& text);  // stop | skip; UsageError naming --on-nan
const char* nan_policy_name(NanPolicy p);

// What a run does with checkpoints already in its --checkpoint-dir (checkpoint_dir.h): a fresh run
// refuses them, a resumed one continues beside them, --overwrite-checkpoints deletes them first.
enum class ExistingCheckpoints { refuse, keep, replace };

struct GuardOptions {
  std::string checkpoint_dir;    // empty: no checkpoints
  int64_t checkpoint_every = 0;  // steps between checkpoints; 0: only at the end (and on a stop)
  int keep_checkpoints = 3;      // newest kept; 0 keeps all
  NanPolicy on_nan = NanPolicy::stop;
  double checkpoint_timeout = 0;  // seconds peers wait for a save; 0: derived (checkpoint_deadline)
  ExistingCheckpoints existing = ExistingCheckpoints::refuse;
};

// Throws UsageError naming the option when a value is out of range.
void validate(const GuardOptions& o);

// How long every rank waits for rank 0 to write a checkpoint of `checkpoint_bytes`:
// o.checkpoint_timeout when set, else the collective timeout plus 1 s per 10 MB.
Millis checkpoint_deadline(const GuardOptions& o, Millis collective_timeout,
                           uint64_t checkpoint_bytes);

class StepGuard {
 public:
  StepGuard(Communicator& comm, const GuardOptions& options);

  void before_reduce(double local_loss_sum);
  // Proceed or skip. `step` is the 0-based global step being taken; `epoch` 0-based.
  Verdict check_update(bool grads_finite, int64_t step, int epoch);
  // Proceed, save or stop, after global step `step` (1-based: steps done) of `total_steps`.
  Verdict after_step(int64_t step, int64_t total_steps);
  // Warns of skipped steps; save when the run's final checkpoint is still to be written.
  Verdict at_end(int64_t step);
  // The trainer wrote a checkpoint of global step `step` into `path`.
  void saved(int64_t step, const std::string& path);
  // Says why the run stops, once the trainer has acted on a stop verdict.
  void report_stop(int64_t step) const;

  bool keeps_checkpoints() const { return !options_.checkpoint_dir.empty(); }
  bool stopped() const { return stop_signal_ != 0; }
  // A stop signal ended training before its configured steps: the run is not finished, and a
  // checkpoint (when there is a --checkpoint-dir) holds where it stopped. Same on every rank.
  bool stopped_early() const { return stopped_early_; }
  int stop_signal() const { return stop_signal_; }  // the agreed signal number, 0 when none
  int64_t skipped_steps() const { return skipped_; }
  // --on-nan skip stops the run (as --on-nan stop would) at this many skipped steps in a row.
  static constexpr int64_t kMaxSkippedInARow = 20;
  const std::string& last_checkpoint() const { return last_checkpoint_; }
  const GuardOptions& options() const { return options_; }

 private:
  Communicator& comm_;
  GuardOptions options_;
  int32_t flags_[2] = {0, 0};
  WorkHandle pending_;
  int stop_signal_ = 0;
  bool stopped_early_ = false;
  int64_t skipped_ = 0;
  int64_t skipped_in_a_row_ = 0;
  int64_t last_saved_step_ = -1;
  std::string last_checkpoint_;
};

}  // namespace lockstep
