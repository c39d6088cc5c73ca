#include "runtime/train/run_reporter.h"

namespace lockstep {

void sum_over_ranks(Communicator& comm, kernels::LossTotals& t) {
  double v[3] = {t.loss_sum, t.correct, t.samples};
  comm.all_reduce_inplace(v, 3, ReduceOp::sum);
  t.loss_sum = v[0];
  t.correct = v[1];
  t.samples = v[2];
}

RunReporter::RunReporter(Communicator& comm, const ReportOptions& options)
    : comm_(comm),
      options_(options),
      progress_(options.print, options.progress_bar, options.classification, options.metrics_path,
                options.bits_per_byte, options.append_metrics) {}

void RunReporter::start(const StepTimes& times) {
  window_ = kernels::LossTotals{};
  window_start_ = times;
}

int RunReporter::epochs() const {
  const int64_t spe = options_.steps_per_epoch;
  return static_cast<int>((options_.total_steps + spe - 1) / spe);
}

ProgressReport RunReporter::position(const TrainState& at, const StepTimes& times) const {
  ProgressReport r;
  r.epoch = at.epoch + 1;
  r.epochs = epochs();
  r.step_in_epoch = at.step_in_epoch;
  r.steps_per_epoch = options_.steps_per_epoch;
  r.global_step = at.global_step;
  r.total_steps = options_.total_steps;
  const double per_step = times.steps > 0 ? times.total / static_cast<double>(times.steps) : 0;
  r.eta_seconds = per_step * static_cast<double>(options_.total_steps - at.global_step);
  return r;
}

void RunReporter::after_step(const TrainState& at, const kernels::LossTotals& step,
                             const StepTimes& times, double lr) {
  window_ += step;
  const bool epoch_over =
      at.step_in_epoch == options_.steps_per_epoch || at.global_step == options_.total_steps;
  if (at.global_step % options_.log_every == 0 || epoch_over)
    report(at, times, lr);
  else
    progress_.tick(position(at, times));
  if (options_.straggler_every > 0 && at.global_step % options_.straggler_every == 0) {
    StragglerReport s = straggler_.measure(comm_, times, at.global_step);
    progress_.note(s.text(), s.json());
  }
}

void RunReporter::report(const TrainState& at, const StepTimes& times, double lr) {
  sum_over_ranks(comm_, window_);
  const StepTimes w = times.minus(window_start_);
  ProgressReport r = position(at, times);
  r.loss = window_.mean_loss();
  r.accuracy = window_.accuracy();
  r.lr = lr;
  r.samples_per_second = w.total > 0 ? static_cast<double>(w.samples) / w.total : 0;
  r.data_wait_share = w.total > 0 ? w.data / w.total : 0;
  progress_.report(r);
  window_ = kernels::LossTotals{};
  window_start_ = times;
}

EpochSummary RunReporter::epoch_summary(const TrainState& at, kernels::LossTotals epoch,
                                        const StepTimes& epoch_times) {
  sum_over_ranks(comm_, epoch);
  EpochSummary s;
  s.epoch = at.epoch + 1;
  s.global_step = at.global_step;
  s.train_loss = epoch.mean_loss();
  s.train_accuracy = epoch.accuracy();
  s.samples_per_second =
      epoch_times.total > 0 ? static_cast<double>(epoch_times.samples) / epoch_times.total : 0;
  return s;
}

}  // namespace lockstep
