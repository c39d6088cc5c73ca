// StepGuard: what the training loop does around each step to survive the outside world: periodic
// and final checkpoints, stop signals (SIGTERM, SIGINT, SIGUSR1), and non-finite losses or
// gradients. The Trainer owns one and calls it at fixed points of every step, on every rank:
//
//   before_reduce(local loss)  before the gradient all-reduce: queues a 2-int all-reduce (max) of
//                              {stop signal seen here, local loss non-finite}. It is ordered just
//                              before the gradient all-reduce, so it costs one small message and
//                              no extra wait. A signal may reach ranks at different steps; after
//                              this reduction every rank knows whether any rank got one.
//   update_ok(grads)           after the gradient all-reduce: false when the step must not be
//                              applied (--on-nan skip), UsageError naming the step (--on-nan
//                              stop). Gradients are identical on every rank after the reduction,
//                              so every rank reaches the same verdict without talking.
//   after_step(trainer)        writes a checkpoint every `checkpoint_every` steps, and on an agreed
//                              stop writes one and returns true: the loop ends after this step.
//                              A stop agreed on the run's last step is no early stop: training is
//                              complete, and stopped_early() stays false.
//   at_end(trainer)            the final checkpoint.
// Checkpoints are written by rank 0 after a replica check (never from diverged or non-finite
// parameters); every rank then waits at a barrier until the checkpoint deadline
// (checkpoint_deadline below: --checkpoint-timeout, by default --timeout plus 1 s per 10 MB of
// checkpoint), so a slow file system does not look like a dead peer while a stopped rank 0 still
// ends the job in bounded time; the timeout's message names the file and the option.
// Constructing a StepGuard installs the stop-signal handlers.
// Used by the training thread only.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/communicator.h"

namespace lockstep {

class Trainer;

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
  // `step` is the 0-based global step being taken; `epoch` 0-based.
  bool update_ok(const float* grads, size_t count, int64_t step, int epoch);
  // The same verdict for gradients checked elsewhere (on a GPU, by their global norm).
  bool update_ok(bool grads_finite, int64_t step, int epoch);
  bool after_step(Trainer& trainer);
  void at_end(Trainer& trainer);

  bool stopped() const { return stop_signal_ != 0; }
  // A stop signal ended training before its configured steps: the run is not finished, and a
  // checkpoint (when there is a --checkpoint-dir) holds where it stopped. Same on every rank.
  bool stopped_early() const { return stopped_early_; }
  int stop_signal() const { return stop_signal_; }  // the agreed signal number, 0 when none
  int64_t skipped_steps() const { return skipped_; }
  const std::string& last_checkpoint() const { return last_checkpoint_; }
  const GuardOptions& options() const { return options_; }

  // Collective: verifies the replicas, then rank 0 writes a checkpoint; returns its path (on
  // every rank).
  std::string save(Trainer& trainer);

 private:
  Communicator& comm_;
  GuardOptions options_;
  int32_t flags_[2] = {0, 0};
  WorkHandle pending_;
  int stop_signal_ = 0;
  bool stopped_early_ = false;
  int64_t skipped_ = 0;
  int64_t last_saved_step_ = -1;
  std::string last_checkpoint_;
};

}  // namespace lockstep
