// RunReporter: what a training run tells its user as it goes, from numbers the Trainer hands it:
// the window of this rank's loss totals since the last report, reduced over the ranks every
// log_every steps and when an epoch ends (between reports, a progress tick); a straggler note every
// straggler_every steps (straggler.h); the epoch summary. It owns the Progress printer
// (progress.h), which prints on one rank only.
//
// Collective where it reduces: every rank calls after_step() and epoch_summary() at the same
// points. Used by the training thread only.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/step/loss_totals.h"
#include "runtime/base/communicator.h"
#include "runtime/observe/progress.h"
#include "runtime/observe/step_times.h"
#include "runtime/observe/straggler.h"
#include "runtime/train/train_state.h"

namespace lockstep {

struct ReportOptions {
  bool print = true;  // this rank prints
  bool progress_bar = false;
  bool classification = true;
  bool bits_per_byte = false;   // a byte-level language model: per-token losses, also in bits/byte
  std::string metrics_path;     // JSON lines; empty: none
  bool append_metrics = false;  // append to metrics_path (a resumed run) rather than replace it
  int64_t log_every = 50;
  int64_t straggler_every = 100;  // 0: no straggler notes
  int64_t steps_per_epoch = 1;
  int64_t total_steps = 1;
};

class RunReporter {
 public:
  // Throws UsageError naming --metrics when the metrics file cannot be opened.
  RunReporter(Communicator& comm, const ReportOptions& options);

  // A run begins at `times`: an empty window.
  void start(const StepTimes& times);
  // After a step (`at` counts it): its totals join the window, then a reduced report or a tick,
  // then a straggler note when one is due. `lr` is the step's learning rate.
  void after_step(const TrainState& at, const kernels::LossTotals& step, const StepTimes& times,
                  double lr);
  // Collective: the epoch's training figures from this rank's totals and the times since the
  // epoch began (test, seconds: the caller's).
  EpochSummary epoch_summary(const TrainState& at, kernels::LossTotals epoch,
                             const StepTimes& epoch_times);
  void epoch_end(const EpochSummary& s) { progress_.epoch_end(s, epochs()); }
  // An evaluation between epoch ends (--eval-every), after the step `at` counts.
  void step_eval(const TrainState& at, const EvalResult& e) {
    progress_.step_eval(at.global_step, at.epoch + 1, e);
  }
  void finish_line() { progress_.finish_line(); }

 private:
  int epochs() const;  // epochs shown: the run's steps in whole or partial epochs
  ProgressReport position(const TrainState& at, const StepTimes& times) const;
  void report(const TrainState& at, const StepTimes& times, double lr);

  Communicator& comm_;
  ReportOptions options_;
  Progress progress_;
  StragglerWatch straggler_;
  kernels::LossTotals window_;  // this rank's totals since the last report
  StepTimes window_start_;      // the run's times at the last report
};

// Sums the totals over the ranks: the three values the reports read, in one message.
void sum_over_ranks(Communicator& comm, kernels::LossTotals& t);

}  // namespace lockstep
