#include "runtime/trainer.h"

#include <algorithm>
#include <climits>
#include <cmath>

#include "kernels/loss.h"
#include "kernels/optimizer.h"
#include "runtime/agree.h"
#include "runtime/buckets.h"
#include "runtime/checkpoint_dir.h"
#include "runtime/device_step.h"
#include "runtime/error.h"
#include "runtime/gpu_trace.h"
#include "runtime/nvtx.h"
#include "runtime/sharded_loader.h"
#include "runtime/step_timer.h"
#include "runtime/straggler.h"
#include "runtime/train_checks.h"
#include "runtime/trace.h"

namespace lockstep {

namespace {

uint64_t fnv1a(const void* data, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// The batch's loss on the host (CPU layers): its totals, and scale * dLoss/dout into dout.
kernels::LossResult host_loss(const Batch& b, const float* out, bool classification, int outputs,
                              float scale, float* dout) {
  const int rows = static_cast<int>(b.rows);
  return classification ? kernels::softmax_cross_entropy_cpu(out, b.labels.data(), b.mask.data(),
                                                             rows, outputs, scale, dout)
                        : kernels::mse_cpu(out, b.targets.data(), b.mask.data(), rows, outputs,
                                           scale, dout);
}

int to_int_dim(int64_t d, const DatasetInfo& info) {
  if (d <= 0 || d > INT32_MAX / 2)
    throw UsageError(info.path + ": sample dimension " + std::to_string(d) + " of " + info.x_name +
                     " is out of range");
  return static_cast<int>(d);
}

}  // namespace

LossKind parse_loss(const std::string& text) {
  if (text == "auto") return LossKind::automatic;
  if (text == "cross-entropy") return LossKind::cross_entropy;
  if (text == "mse") return LossKind::mse;
  throw UsageError("--loss must be auto, cross-entropy or mse, not '" + text + "'");
}

const char* loss_name(LossKind k) {
  switch (k) {
    case LossKind::automatic: return "auto";
    case LossKind::cross_entropy: return "cross-entropy";
    case LossKind::mse: return "mse";
  }
  return "?";
}

void validate(const TrainConfig& c, int world_size) {
  auto positive = [](double v) { return std::isfinite(v) && v > 0; };
  if (!positive(c.lr)) throw UsageError("--lr must be a positive number, not " + std::to_string(c.lr));
  if (!(std::isfinite(c.min_lr) && c.min_lr >= 0))
    throw UsageError("--min-lr must be >= 0, not " + std::to_string(c.min_lr));
  if (c.warmup_steps < 0)
    throw UsageError("--warmup-steps must be >= 0, not " + std::to_string(c.warmup_steps));
  if (c.base_batch <= 0)
    throw UsageError("--base-batch must be positive, not " + std::to_string(c.base_batch));
  if (c.global_batch <= 0)
    throw UsageError("--global-batch must be positive, not " + std::to_string(c.global_batch));
  if (c.grad_accum < 1)
    throw UsageError("--grad-accum must be >= 1, not " + std::to_string(c.grad_accum));
  if (c.global_batch % c.grad_accum != 0)
    throw UsageError("--global-batch " + std::to_string(c.global_batch) +
                     " does not split into --grad-accum " + std::to_string(c.grad_accum) +
                     " equal micro-batches");
  int64_t micro = c.global_batch / c.grad_accum;
  if (micro % world_size != 0) {
    if (c.grad_accum == 1)
      throw UsageError("--global-batch " + std::to_string(c.global_batch) +
                       " is not divisible by the " + std::to_string(world_size) +
                       " ranks: " + suggest_batch_sizes(c.global_batch, world_size));
    throw UsageError("--global-batch " + std::to_string(c.global_batch) + " with --grad-accum " +
                     std::to_string(c.grad_accum) + " gives micro-batches of " +
                     std::to_string(micro) + ", not divisible by the " +
                     std::to_string(world_size) + " ranks: use a multiple of " +
                     std::to_string(int64_t{c.grad_accum} * world_size));
  }
  if (c.steps < 0) throw UsageError("--steps must be >= 0, not " + std::to_string(c.steps));
  if (c.steps == 0 && c.epochs < 1)
    throw UsageError("--epochs must be >= 1 (or set --steps), not " + std::to_string(c.epochs));
  if (c.log_every < 1)
    throw UsageError("--log-every must be >= 1, not " + std::to_string(c.log_every));
  if (c.straggler_every < 0)
    throw UsageError("--straggler-every must be >= 0, not " + std::to_string(c.straggler_every));
  if (c.check_every < 0)
    throw UsageError("--check-every must be >= 0, not " + std::to_string(c.check_every));
  if (c.prefetch < 1) throw UsageError("--prefetch must be >= 1, not " + std::to_string(c.prefetch));
  if (!(std::isfinite(c.clip_norm) && c.clip_norm >= 0))
    throw UsageError("--clip-norm must be >= 0, not " + std::to_string(c.clip_norm));
  bucket_bytes_from_mb(c.bucket_mb);
  if (c.precision == Precision::bf16 && c.device != DeviceKind::cuda)
    throw UsageError("--precision bf16 needs --device cuda (the CPU layers compute in fp32)");
  parse_model_spec(c.model);
  validate(c.optimizer);
  validate(c.guard);
}

struct Trainer::Impl {
  std::unique_ptr<DeviceStep> device;  // cuda only; first, so that it outlives what uses its stream
  DatasetInfo info;
  bool classification = true;
  int outputs = 0;
  int64_t micro_rows = 0;  // rows per rank per micro-batch
  int64_t steps_per_epoch = 0;
  LrSchedule schedule;
  std::unique_ptr<ShardedLoader> train, test;
  std::unique_ptr<Progress> progress;
  Batch batch;
  std::unique_ptr<StepTimer> timer;  // after `device`: it may hold the device's DeviceTimer
  double last_eval_step = -1;  // global step of the last evaluation
  EvalResult last_eval;
  std::unique_ptr<StepGuard> guard;
  std::unique_ptr<BucketReducer> reducer;
  StragglerWatch straggler;
};

Trainer::Trainer(Communicator& host, Communicator& grads, const TrainConfig& config)
    : comm_(host),
      grad_comm_(grads),
      config_(config),
      impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  // Loss sums, flags and checksums are host values, and so are a CPU model's gradients: a
  // device-buffer communicator is refused here for a CPU trainer, identically on every rank,
  // before any collective.
  require_host_buffers(comm_, "the trainer");
  if (grad_comm_.size() != comm_.size() || grad_comm_.rank() != comm_.rank())
    throw Error("the trainer's gradient communicator (rank " + std::to_string(grad_comm_.rank()) +
                " of " + std::to_string(grad_comm_.size()) + ") is not over the ranks of its host "
                "communicator (rank " + std::to_string(comm_.rank()) + " of " +
                std::to_string(comm_.size()) + ")");
  const int P = comm_.size(), rank = comm_.rank();
  std::string problem;
  try {
    validate(config_, P);
    if (config_.device == DeviceKind::cuda) require_cuda_training();
    ModelSpec spec = parse_model_spec(config_.model);
    m.info = inspect_training_data(config_);  // resolves --loss auto (train_checks.h)
    DatasetSpec test_spec = config_.train;
    test_spec.group = config_.test_group;
    m.classification = m.info.classification;
    m.outputs = m.classification ? m.info.num_classes : m.info.target_dim;

    const int64_t B = config_.global_batch, K = config_.grad_accum;
    m.micro_rows = B / K / P;
    m.steps_per_epoch = config_.drop_remainder ? m.info.rows / B : (m.info.rows + B - 1) / B;
    check_batch_fits(config_, m.info, m.outputs, m.micro_rows);

    SampleShape input;
    for (int64_t d : m.info.sample_shape) input.push_back(to_int_dim(d, m.info));
    ModelPlacement place;
    if (config_.device == DeviceKind::cuda) {
      m.device = std::make_unique<DeviceStep>(shape_size(input), m.outputs,
                                              static_cast<int>(m.micro_rows), m.classification);
      place = {DeviceKind::cuda, m.device->stream(), config_.precision, &m.device->compute_trace()};
    }
    m.timer = std::make_unique<StepTimer>(times_, hook_, m.device ? &m.device->timer() : nullptr);
    model_ = std::make_unique<Model>(spec, input, m.outputs, static_cast<int>(m.micro_rows), place);
    optimizer_ = std::make_unique<Optimizer>(config_.optimizer, model_->param_count(),
                                             place.device, place.stream);
    m.reducer = std::make_unique<BucketReducer>(
        grad_comm_, assign_buckets(model_->layer_spans(), bucket_bytes_from_mb(config_.bucket_mb)),
        config_.grad_reduce_dtype, place.device, place.stream);

    LoaderOptions lo;
    lo.global_batch = B / K;
    lo.seed = config_.seed;
    lo.shuffle = config_.shuffle;
    lo.drop_remainder = config_.drop_remainder;
    lo.prefetch = config_.prefetch;
    m.train = std::make_unique<ShardedLoader>(config_.train, lo, rank, P);
    LoaderOptions eo = lo;
    eo.global_batch = m.micro_rows * P;
    eo.shuffle = false;
    eo.drop_remainder = false;
    m.test = std::make_unique<ShardedLoader>(test_spec, eo, rank, P);

    m.schedule.kind = config_.lr_schedule;
    m.schedule.peak_lr = scaled_lr(config_.lr, config_.lr_scaling, B, config_.base_batch);
    m.schedule.warmup_steps = config_.warmup_steps;
    m.schedule.total_steps = total_steps();
    m.schedule.min_lr = config_.min_lr;
    m.progress = std::make_unique<Progress>(config_.print && rank == 0, config_.progress_bar,
                                            m.classification, config_.metrics_path);
    m.guard = std::make_unique<StepGuard>(comm_, config_.guard);
  } catch (const UsageError& e) {
    problem = e.what();
  }
  agree_or_throw(comm_, problem.empty(), problem);
  prepare_checkpoint_dir(config_.guard, comm_);
}

Trainer::~Trainer() = default;

const DatasetInfo& Trainer::train_info() const { return impl_->info; }
const StepGuard& Trainer::guard() const { return *impl_->guard; }
int64_t Trainer::steps_per_epoch() const { return impl_->steps_per_epoch; }

int64_t Trainer::total_steps() const {
  return config_.steps > 0 ? config_.steps : config_.epochs * impl_->steps_per_epoch;
}

double Trainer::lr_at_step(int64_t global_step) const {
  return lr_at(impl_->schedule, global_step);
}

void Trainer::init_params() {
  if (comm_.rank() == 0) model_->init_params(config_.seed);
  if (model_->device() == DeviceKind::cpu) {
    comm_.broadcast(model_->params(), model_->param_count(), DType::f32, 0);
  } else {
    std::vector<float> host = model_->params_to_host();
    comm_.broadcast(host.data(), host.size(), DType::f32, 0);
    model_->write_params(0, host.data(), host.size());
  }
  initialized_ = true;
  verify_replicas("after the initial broadcast");
}

void Trainer::restore(const TrainState& state) {
  state_ = state;
  initialized_ = true;
}

void Trainer::verify_replicas(const std::string& when) {
  const std::vector<float> params = model_->params_to_host();  // a copy down from a GPU
  int64_t mine = static_cast<int64_t>(fnv1a(params.data(), params.size() * sizeof(float)));
  std::vector<int64_t> all(static_cast<size_t>(comm_.size()));
  comm_.all_gather(&mine, all.data(), 1, DType::i64);
  std::string bad;
  for (size_t r = 1; r < all.size(); ++r)
    if (all[r] != all[0]) {
      if (!bad.empty()) bad += ", ";
      bad += std::to_string(r);
    }
  if (!bad.empty())
    throw Error("replica check failed " + when + ": the parameters of rank(s) " + bad +
                " differ from rank 0's (checksums of the flat parameter buffer disagree); the "
                "ranks no longer train the same model");
}

void Trainer::train_step(double sums[3]) {
  Impl& m = *impl_;
  StepTimer& timer = *m.timer;  // device phases on a GPU (step_times.h)
  const double t_start = timer.start_step();
  const int64_t B = config_.global_batch;
  const int64_t first_row = state_.step_in_epoch * B;
  const int64_t want_valid = config_.drop_remainder ? B : std::min(B, m.info.rows - first_row);
  const float scale = 1.0f / static_cast<float>(want_valid);
  int64_t got_valid = 0;
  // Nsight sees the same phases as the trace and the step-time breakdown (nvtx.h).
  NvtxRange step_range("step", "step");
  NvtxPhases phases;
  model_->zero_grads();
  m.reducer->start_step(model_->grads());
  for (int j = 0; j < config_.grad_accum; ++j) {
    phases.next("data wait", "data");
    if (!m.train->next(m.batch)) break;
    const float* x = m.device ? m.device->upload(m.batch) : m.batch.x.data();
    timer.data_ready();
    phases.next("forward", "forward");
    timer.forward_begin();
    const int rows = static_cast<int>(m.batch.rows);
    const float* out = model_->forward(x, rows);
    // On a GPU the loss totals stay on the device until the step's end (DeviceStep::take).
    kernels::LossResult r;
    if (m.device)
      m.device->loss(out, rows, scale, model_->output_grad());
    else
      r = host_loss(m.batch, out, m.classification, m.outputs, scale, model_->output_grad());
    timer.forward_end();
    phases.next("backward", "backward");
    // Only the last micro-batch's backward finishes the gradients, so only it starts reductions.
    if (j + 1 == config_.grad_accum)
      model_->backward(rows, [&](int layer) {
        timer.backward_progress();
        m.reducer->layer_done(layer);
      });
    else
      model_->backward(rows);
    if (m.device) m.device->release();
    timer.backward_end();
    sums[0] += r.loss_sum;
    sums[1] += r.correct;
    sums[2] += static_cast<double>(m.batch.valid);
    got_valid += m.batch.global_valid;
  }
  if (got_valid != want_valid)
    throw Error("step " + std::to_string(state_.global_step) + " of epoch " +
                std::to_string(state_.epoch + 1) + " got " + std::to_string(got_valid) +
                " samples from the loader, expected " + std::to_string(want_valid));
  phases.next("all_reduce", "collective");
  if (!m.device) m.guard->before_reduce(sums[0]);
  m.reducer->wait_all();
  timer.reduced();
  phases.next("optimizer", "optimizer");
  bool apply;
  if (m.device) {
    // One read-back per step: the loss totals and the norm of the reduced gradient, which must be
    // known on the host to decide the step. The guard's flags go out only now that the local loss
    // is known (a round trip more than on the CPU, where they travel with the gradients).
    DeviceStep::Totals d = m.device->take(model_->grads(), model_->param_count());
    timer.collect(/*synced=*/true);  // the read-back waited for the stream
    sums[0] += d.loss_sum;
    sums[1] += d.correct;
    m.guard->before_reduce(sums[0]);
    apply = m.guard->update_ok(std::isfinite(d.grad_norm), state_.global_step, state_.epoch);
  } else {
    apply = m.guard->update_ok(model_->grads(), model_->param_count(), state_.global_step,
                               state_.epoch);
  }
  if (!apply) sums[0] = sums[1] = sums[2] = 0;  // a skipped step stays out of the reported loss
  if (apply && config_.clip_norm > 0) {
    if (m.device)
      m.device->clip(model_->grads(), model_->param_count(), config_.clip_norm);
    else
      kernels::clip_by_global_norm_cpu(model_->grads(), model_->param_count(), config_.clip_norm);
  }
  if (apply) {
    GpuSpan span(m.device ? &m.device->compute_trace() : nullptr, "optimizer update", "optimizer");
    optimizer_->step(model_->params(), model_->grads(),
                     static_cast<float>(lr_at_step(state_.global_step)));
  }
  const double t_end = timer.updated();
  phases.done();
  times_.total += t_end - t_start;
  times_.steps += 1;
  times_.samples += want_valid;
  state_.step_in_epoch += 1;
  state_.global_step += 1;
  state_.samples_seen += want_valid;
}

EvalResult Trainer::evaluate() {
  TraceSpan span("evaluate", "evaluation");
  Impl& m = *impl_;
  double sums[3] = {0, 0, 0};
  m.test->start_epoch(0);
  while (m.test->next(m.batch)) {
    const int rows = static_cast<int>(m.batch.rows);
    const float* out = model_->forward(m.device ? m.device->upload(m.batch) : m.batch.x.data(), rows);
    sums[2] += static_cast<double>(m.batch.valid);
    if (m.device) {  // totals summed on the device, read back once below
      m.device->loss(out, rows, 0.0f, nullptr);
      m.device->release();
      continue;
    }
    kernels::LossResult r = host_loss(m.batch, out, m.classification, m.outputs, 0.0f, nullptr);
    sums[0] += r.loss_sum;
    sums[1] += r.correct;
  }
  if (m.device) {
    DeviceStep::Totals d = m.device->take();
    sums[0] = d.loss_sum;
    sums[1] = d.correct;
  }
  comm_.all_reduce_inplace(sums, 3, ReduceOp::sum);
  EvalResult e;
  e.samples = static_cast<int64_t>(sums[2]);
  if (sums[2] > 0) {
    e.loss = sums[0] / sums[2];
    e.accuracy = sums[1] / sums[2];
  }
  m.last_eval_step = static_cast<double>(state_.global_step);
  m.last_eval = e;
  return e;
}

void Trainer::report(double window[3], const StepTimes& since, int epochs_shown) {
  Impl& m = *impl_;
  comm_.all_reduce_inplace(window, 3, ReduceOp::sum);
  StepTimes w = times_.minus(since);
  ProgressReport r;
  r.epoch = state_.epoch + 1;
  r.epochs = epochs_shown;
  r.step_in_epoch = state_.step_in_epoch;
  r.steps_per_epoch = m.steps_per_epoch;
  r.global_step = state_.global_step;
  r.total_steps = total_steps();
  r.loss = window[2] > 0 ? window[0] / window[2] : 0;
  r.accuracy = window[2] > 0 ? window[1] / window[2] : 0;
  r.lr = lr_at_step(state_.global_step - 1);
  r.samples_per_second = w.total > 0 ? static_cast<double>(w.samples) / w.total : 0;
  r.data_wait_share = w.total > 0 ? w.data / w.total : 0;
  double per_step = times_.steps > 0 ? times_.total / static_cast<double>(times_.steps) : 0;
  r.eta_seconds = per_step * static_cast<double>(total_steps() - state_.global_step);
  m.progress->report(r);
  window[0] = window[1] = window[2] = 0;
}

TrainResult Trainer::run() {
  Impl& m = *impl_;
  if (!initialized_)
    init_params();
  else
    verify_replicas("when resuming");
  const int64_t total = total_steps();
  const int64_t spe = m.steps_per_epoch;
  const int epochs_shown = static_cast<int>((total + spe - 1) / spe);
  TrainResult result;
  const StepTimes at_start = times_;
  double window[3] = {0, 0, 0};
  StepTimes window_start = times_;
  while (state_.global_step < total) {
    m.train->start_epoch(state_.epoch, state_.step_in_epoch * config_.grad_accum);
    const StepTimes epoch_start = times_;
    double epoch_sums[3] = {0, 0, 0};
    Stopwatch epoch_clock;
    while (state_.step_in_epoch < spe && state_.global_step < total) {
      double step_sums[3] = {0, 0, 0};
      train_step(step_sums);
      for (int i = 0; i < 3; ++i) {
        window[i] += step_sums[i];
        epoch_sums[i] += step_sums[i];
      }
      if (config_.check_every > 0 && state_.global_step % config_.check_every == 0)
        verify_replicas("at step " + std::to_string(state_.global_step));
      bool epoch_over = state_.step_in_epoch == spe || state_.global_step == total;
      if (state_.global_step % config_.log_every == 0 || epoch_over) {
        report(window, window_start, epochs_shown);
        window_start = times_;
      } else {
        ProgressReport tick;
        tick.epoch = state_.epoch + 1;
        tick.epochs = epochs_shown;
        tick.step_in_epoch = state_.step_in_epoch;
        tick.steps_per_epoch = spe;
        double per_step = times_.total / static_cast<double>(times_.steps);
        tick.eta_seconds = per_step * static_cast<double>(total - state_.global_step);
        m.progress->tick(tick);
      }
      if (config_.straggler_every > 0 && state_.global_step % config_.straggler_every == 0) {
        StragglerReport s = m.straggler.measure(comm_, times_, state_.global_step);
        m.progress->note(s.text(), s.json());
      }
      if (m.guard->after_step(*this)) break;
    }
    if (m.guard->stopped_early()) break;
    comm_.all_reduce_inplace(epoch_sums, 3, ReduceOp::sum);
    StepTimes et = times_.minus(epoch_start);
    EpochSummary s;
    s.epoch = state_.epoch + 1;
    s.global_step = state_.global_step;
    s.train_loss = epoch_sums[2] > 0 ? epoch_sums[0] / epoch_sums[2] : 0;
    s.train_accuracy = epoch_sums[2] > 0 ? epoch_sums[1] / epoch_sums[2] : 0;
    s.samples_per_second = et.total > 0 ? static_cast<double>(et.samples) / et.total : 0;
    if (config_.eval_every_epoch) s.test = evaluate();
    s.seconds = epoch_clock.seconds();
    if (config_.eval_every_epoch) m.progress->epoch_end(s, epochs_shown);
    result.epochs.push_back(s);
    if (state_.step_in_epoch == spe) {
      state_.epoch += 1;
      state_.step_in_epoch = 0;
    }
  }
  m.progress->finish_line();
  m.timer->flush();  // a GPU's last phases, before the times are read
  verify_replicas("at the end of training");
  m.guard->at_end(*this);
  if (!m.guard->stopped_early())
    result.test = m.last_eval_step == static_cast<double>(state_.global_step) ? m.last_eval
                                                                             : evaluate();
  result.times = times_.minus(at_start);
  result.samples_per_second =
      result.times.total > 0 ? static_cast<double>(result.times.samples) / result.times.total : 0;
  return result;
}

}  // namespace lockstep
