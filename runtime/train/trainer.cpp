#include "runtime/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <optional>
#include <thread>
#include <utility>

#include "kernels/cuda_memory.h"
#include "runtime/base/error.h"
#include "runtime/base/log.h"
#include "runtime/comm/agree.h"
#include "runtime/comm/buckets.h"
#include "runtime/comm/replica_check.h"
#include "runtime/data/sharded_loader.h"
#include "runtime/observe/gpu_trace.h"
#include "runtime/observe/nvtx.h"
#include "runtime/observe/step_timer.h"
#include "runtime/observe/trace.h"
#include "runtime/train/checkpoint_dir.h"
#include "runtime/train/device_step.h"
#include "runtime/train/run_reporter.h"
#include "runtime/train/step.h"
#include "runtime/train/train_checkpoint.h"
#include "runtime/train/train_checks.h"

namespace lockstep {

namespace {

int to_int_dim(int64_t d, const DatasetInfo& info) {
  if (d <= 0 || d > INT32_MAX / 2)
    throw UsageError(info.path + ": sample dimension " + std::to_string(d) + " of " + info.x_name +
                     " is out of range");
  return static_cast<int>(d);
}

}  // namespace

struct Trainer::Impl {
  std::unique_ptr<Step> step;  // first, so that it outlives what uses its stream
  DatasetInfo info;
  bool classification = true;
  int outputs = 0;
  int64_t micro_rows = 0;  // rows per rank per micro-batch
  int64_t steps_per_epoch = 0;
  LrSchedule schedule;
  std::unique_ptr<ShardedLoader> train, test;
  std::unique_ptr<RunReporter> reporter;
  Batch batch;
  // The next micro-batch, taken from the loader and staged while the step before it ran
  // (micro_batch); `ahead` says whether it holds one.
  Batch next;
  bool ahead = false;
  std::unique_ptr<StepTimer> timer;  // after `step`: it may hold the step's DeviceTimer
  double last_eval_step = -1;  // global step of the last evaluation
  EvalResult last_eval;
  std::unique_ptr<StepGuard> guard;
  std::unique_ptr<BucketReducer> reducer;
  // CUDA graphs (DESIGN.md decision 18): the step's graphs when full steps are captured (null:
  // never, or no more after a failed capture), and the full steps run uncaptured before the first
  // capture: a layer times its kernels at its first steps, which a graph must not record.
  StepGraphs* graphs = nullptr;
  cudaStream_t stream = nullptr;  // the step's compute stream (ModelPlacement::stream)
  int64_t warm_steps = 0;
  // Test hooks (read once, at construction): the rank whose capture fails
  // (LOCKSTEP_TEST_CAPTURE_FAIL_RANK), and the rank and 1-based step whose loss becomes +Inf
  // with its gradient untouched (LOCKSTEP_TEST_LOSS_INF=rank:step). -1: none.
  int capture_fail_rank = -1;
  int inf_loss_rank = -1;
  int64_t inf_loss_step = -1;
  // ... and the rank whose first step of the run waits before its first batch, and how long
  // (LOCKSTEP_TEST_DELAY_FIRST_BATCH=rank:ms).
  int delay_rank = -1;
  int64_t delay_ms = -1;
  // Deadlines (set_deadlines): zero until set; the start-up steps still to run and whether the
  // first evaluation is done.
  Millis steady{0}, startup{0};
  int64_t startup_steps_left = 0;
  bool evaluated = false;
};

namespace {

// Full steps run uncaptured before a graph records one: the first times the convolutions' kernel
// families (conv_cuda.cu), the second runs the settled choices once (first uses of a library's
// workspace) so that the capture records the steady step.
constexpr int64_t kWarmStepsBeforeCapture = 2;

// The test hooks' values: a number, or "a:b" (two numbers); -1 where unset or malformed.
int64_t env_number(const char* name, int part = 0) {
  const char* v = std::getenv(name);
  if (v == nullptr) return -1;
  std::string text(v);
  if (part == 1) {
    const size_t colon = text.find(':');
    if (colon == std::string::npos) return -1;
    text = text.substr(colon + 1);
  } else {
    text = text.substr(0, text.find(':'));
  }
  char* end = nullptr;
  const long long n = std::strtoll(text.c_str(), &end, 10);
  return end != text.c_str() && *end == '\0' ? n : -1;
}

}  // namespace

Trainer::Trainer(Communicator& host, Communicator& grads, const TrainConfig& config)
    : comm_(host),
      grad_comm_(grads),
      config_(config),
      impl_(std::make_unique<Impl>()) {
  impl_->capture_fail_rank = static_cast<int>(env_number("LOCKSTEP_TEST_CAPTURE_FAIL_RANK"));
  impl_->inf_loss_rank = static_cast<int>(env_number("LOCKSTEP_TEST_LOSS_INF"));
  impl_->inf_loss_step = env_number("LOCKSTEP_TEST_LOSS_INF", 1);
  impl_->delay_rank = static_cast<int>(env_number("LOCKSTEP_TEST_DELAY_FIRST_BATCH"));
  impl_->delay_ms = env_number("LOCKSTEP_TEST_DELAY_FIRST_BATCH", 1);
  // Loss sums, flags and checksums are host values, and so are a CPU model's gradients: a
  // device-buffer communicator is refused here for a CPU trainer, identically on every rank,
  // before any collective.
  require_host_buffers(comm_, "the trainer");
  if (grad_comm_.size() != comm_.size() || grad_comm_.rank() != comm_.rank())
    throw Error("the trainer's gradient communicator (rank " + std::to_string(grad_comm_.rank()) +
                " of " + std::to_string(grad_comm_.size()) + ") is not over the ranks of its host "
                "communicator (rank " + std::to_string(comm_.rank()) + " of " +
                std::to_string(comm_.size()) + ")");
  std::string problem;
  try {
    build();
  } catch (const UsageError& e) {
    problem = e.what();
  }
  agree_or_throw(comm_, problem.empty(), problem);
  prepare_checkpoint_dir(config_.guard, comm_);
}

void Trainer::build() {
  Impl& m = *impl_;
  validate(config_, comm_.size());
  if (config_.device == DeviceKind::cuda) require_cuda_training();
  ModelSpec spec = parse_model_spec(config_.model);
  m.info = inspect_training_data(config_);  // resolves --loss auto (train_checks.h)
  m.classification = m.info.classification;
  m.outputs = m.classification ? m.info.num_classes : m.info.target_dim;
  const int64_t B = config_.global_batch;
  m.micro_rows = B / config_.grad_accum / comm_.size();
  m.steps_per_epoch = config_.drop_remainder ? m.info.rows / B : (m.info.rows + B - 1) / B;
  check_batch_fits(config_, m.info, m.outputs, m.micro_rows);
  open_loaders();  // opens the files only: a split held in memory is read at its first batch
  if (const uint64_t held = m.train->held_bytes() + m.test->held_bytes(); held > 0)
    check_batch_fits(config_, m.info, m.outputs, m.micro_rows, held);

  SampleShape input;
  for (int64_t d : m.info.sample_shape) input.push_back(to_int_dim(d, m.info));
  const int rows = static_cast<int>(m.micro_rows);
  const int positions = m.info.positions;
  m.step = make_step(config_.device,
                     {shape_size(input), m.outputs, rows, m.classification, positions});
  // CUDA graphs: the options and the backend decide, so every rank reaches the same answer.
  const bool graphs = config_.device == DeviceKind::cuda && config_.cuda_graphs &&
                      config_.grad_accum == 1 &&
                      (grad_comm_.capturable() || grad_comm_.size() == 1);
  ModelPlacement place = m.step->placement(config_.precision);
  place.graphs = graphs;
  m.timer = std::make_unique<StepTimer>(times_, hook_, m.step->timer());
  model_ = std::make_unique<Model>(spec, input, m.outputs, rows, place, positions);
  optimizer_ = std::make_unique<Optimizer>(config_.optimizer, model_->param_count(),
                                           place.device, place.stream);
  optimizer_->set_decay_ranges(matrix_ranges(model_->param_tensors()));  // adamw: matrices only
  if (config_.grad_reduce_dtype == Precision::bf16 && grad_comm_.backend() == Backend::nccl &&
      grad_comm_.size() >= 16 && comm_.rank() == 0) {
    LS_LOG(debug) << "--grad-reduce-dtype bf16 over NCCL at " << grad_comm_.size()
                  << " ranks: NCCL rounds every partial sum to bf16 (a ring adds "
                  << grad_comm_.size() - 1 << " times), so the reduced gradient carries more "
                     "rounding than at a few ranks; fp32 on the wire keeps it exact to fp32";
  }
  m.reducer = std::make_unique<BucketReducer>(
      grad_comm_, assign_buckets(model_->layer_spans(), bucket_bytes_from_mb(config_.bucket_mb)),
      config_.grad_reduce_dtype, place.device, place.stream);

  if (graphs && m.step->graphs() != nullptr && m.reducer->capturable()) {
    m.graphs = m.step->graphs();
    m.stream = place.stream;
  }

  m.schedule.kind = config_.lr_schedule;
  m.schedule.peak_lr = scaled_lr(config_.lr, config_.lr_scaling, B, config_.base_batch);
  m.schedule.warmup_steps = config_.warmup_steps;
  m.schedule.total_steps = total_steps();
  m.schedule.min_lr = config_.min_lr;
  ReportOptions ro;
  ro.print = config_.print && comm_.rank() == 0;
  ro.progress_bar = config_.progress_bar;
  ro.classification = m.classification;
  ro.bits_per_byte = byte_level_tokens(m.info);
  ro.metrics_path = comm_.rank() == 0 ? config_.metrics_path : "";  // rank 0 writes, printing or not
  ro.log_every = config_.log_every;
  ro.straggler_every = config_.straggler_every;
  ro.steps_per_epoch = m.steps_per_epoch;
  ro.total_steps = total_steps();
  m.reporter = std::make_unique<RunReporter>(comm_, ro);
  m.guard = std::make_unique<StepGuard>(comm_, config_.guard);
}

void Trainer::open_loaders() {
  Impl& m = *impl_;
  const int P = comm_.size(), rank = comm_.rank();
  LoaderOptions lo;
  lo.global_batch = config_.global_batch / config_.grad_accum;
  lo.seed = config_.seed;
  lo.shuffle = config_.shuffle;
  lo.drop_remainder = config_.drop_remainder;
  lo.prefetch = config_.prefetch;
  lo.in_memory_bytes = config_.data_in_memory_mb << 20;
  m.train = std::make_unique<ShardedLoader>(config_.train, lo, rank, P);
  DatasetSpec test_spec = config_.train;
  test_spec.group = config_.test_group;
  LoaderOptions eo = lo;
  eo.global_batch = m.micro_rows * P;
  eo.shuffle = false;
  eo.drop_remainder = false;
  m.test = std::make_unique<ShardedLoader>(test_spec, eo, rank, P);
}

Trainer::~Trainer() {
  // Unwinding with a captured step perhaps in flight: its collectives wait on the device for peers
  // that may never launch theirs, and the step's destructor synchronises its stream. Wait for the
  // stream as for a collective first (the deadline, then the communicator's abort, which ends
  // them), so that the job ends instead of hanging here.
  Impl& m = *impl_;
  if (std::uncaught_exceptions() > 0 && m.stream != nullptr && grad_comm_.capturable()) {
    try {
      grad_comm_.watch_stream(m.stream, "the training step in flight while ending")
          ->wait(grad_comm_.timeout());
    } catch (const std::exception&) {
      // Reported by the error that unwinds; the communicator is aborted.
    }
  }
}

const DatasetInfo& Trainer::train_info() const { return impl_->info; }
const StepGuard& Trainer::guard() const { return *impl_->guard; }
int64_t Trainer::steps_per_epoch() const { return impl_->steps_per_epoch; }

int64_t Trainer::total_steps() const {
  return config_.steps > 0 ? config_.steps : config_.epochs * impl_->steps_per_epoch;
}

void Trainer::set_deadlines(Millis steady, Millis startup) {
  Impl& m = *impl_;
  m.steady = steady;
  m.startup = std::max(steady, startup);
  m.startup_steps_left = kStartupSteps;
  apply_timeout(m.startup);
}

Millis Trainer::steady_timeout() const {
  return impl_->steady.count() > 0 ? impl_->steady : comm_.timeout();
}

void Trainer::apply_timeout(Millis t) {
  comm_.set_timeout(t);
  grad_comm_.set_timeout(t);
}

double Trainer::lr_at_step(int64_t global_step) const {
  return lr_at(impl_->schedule, global_step);
}

void Trainer::init_params() {
  if (comm_.rank() == 0) model_->init_params(config_.seed);
  // Through host memory, where the communicator of host values reads (a copy on the CPU).
  std::vector<float> host = model_->params_to_host();
  comm_.broadcast(host.data(), host.size(), DType::f32, 0);
  model_->write_params(0, host.data(), host.size());
  initialized_ = true;
  verify_replicas("after the initial broadcast");
}

void Trainer::restore(const TrainState& state) {
  state_ = state;
  initialized_ = true;
}

void Trainer::verify_replicas(const std::string& when) {
  check_replicas(comm_, model_->params_to_host(), when);  // a copy down from a GPU
}

LossTotals Trainer::train_step() {
  Impl& m = *impl_;
  const double t_start = m.timer->start_step();  // device phases on a GPU (step_times.h)
  const int64_t B = config_.global_batch;
  const int64_t first_row = state_.step_in_epoch * B;
  const int64_t want_valid = config_.drop_remainder ? B : std::min(B, m.info.rows - first_row);
  // The gradient of the mean loss over the global batch's predictions: each valid row's
  // positions (a token split's T) count, in every micro-batch alike.
  const float scale =
      1.0f / static_cast<float>(static_cast<double>(want_valid) * m.info.positions);
  // Nsight sees the same phases as the trace and the step-time breakdown (nvtx.h).
  NvtxRange step_range("step", "step");
  NvtxPhases phases;
  int64_t got_valid = 0;
  Step::Outcome o;
  bool captured = false;
  if (m.inf_loss_rank == comm_.rank() && m.inf_loss_step == state_.global_step + 1)
    m.step->poison_loss();
  if (m.delay_rank == comm_.rank() && m.delay_ms > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(m.delay_ms));
    m.delay_ms = -1;
  }
  try {
    phases.next("data wait", "data");
    bool have = take_batch();
    // Every row of every rank's slice is real: the same answer on every rank.
    const bool full = have && want_valid == B && m.batch.global_valid == B;
    if (full && m.graphs != nullptr && m.warm_steps >= kWarmStepsBeforeCapture && !tracing()) {
      captured = captured_step(scale, phases, o);
      if (captured) {
        got_valid = m.batch.global_valid;
        captured_steps_ += 1;
      }
    }
    if (!captured) {
      model_->zero_grads();
      m.reducer->start_step(model_->grads());
      for (int j = 0; have;) {
        micro_batch(scale, j + 1 == config_.grad_accum, phases);
        got_valid += m.batch.global_valid;
        if (++j == config_.grad_accum) break;
        phases.next("data wait", "data");
        have = take_batch();
      }
      if (full) m.warm_steps += 1;
    }
    if (got_valid != want_valid)
      throw Error("step " + std::to_string(state_.global_step) + " of epoch " +
                  std::to_string(state_.epoch + 1) + " got " + std::to_string(got_valid) +
                  " samples from the loader, expected " + std::to_string(want_valid));
    if (!captured) {
      phases.next("all_reduce", "collective");
      o = reduce_gradients(phases);
    }
  } catch (...) {
    // A layer, the loader or a reduction failed with bucket reductions in flight: they write into
    // the gradients, so they must finish before the error unwinds past the buffers.
    m.reducer->drain();
    throw;
  }
  const bool apply = m.guard->check_update(o.grads_finite, state_.global_step, state_.epoch) ==
                     Verdict::proceed;
  if (captured) {
    // The graph applied the update unless the loss over all ranks or the reduced gradient was not
    // finite: what the guard's agreed verdict says too.
    const bool applied = m.graphs->applied();
    if (applied != apply)
      throw Error("step " + std::to_string(state_.global_step + 1) + ": the captured step (CUDA "
                  "graph) " + (applied ? "applied" : "left out") + " the update, but the ranks' "
                  "agreed verdict " + (apply ? "applies" : "leaves out") + " it; rerun with "
                  "--cuda-graphs off");
    if (apply) optimizer_->count_update();
  } else if (apply) {
    update();
  }
  const double t_end = captured ? steady_seconds() : m.timer->updated();
  phases.done();
  times_.total += t_end - t_start;
  times_.steps += 1;
  times_.samples += want_valid;
  state_.step_in_epoch += 1;
  state_.global_step += 1;
  state_.samples_seen += want_valid;
  if (m.startup_steps_left > 0 && --m.startup_steps_left == 0) apply_timeout(m.steady);
  return apply ? o.totals : LossTotals{};  // a skipped step stays out of the reported loss
}

bool Trainer::take_batch() {
  Impl& m = *impl_;
  if (m.ahead) {
    std::swap(m.batch, m.next);  // staged during the step before
    m.ahead = false;
    return true;
  }
  return m.train->next(m.batch);
}

bool Trainer::captured_step(float scale, NvtxPhases& phases, Step::Outcome& o) {
  Impl& m = *impl_;
  StepGraphs& graphs = *m.graphs;
  StepTimer& timer = *m.timer;
  const float* x = m.step->upload(m.batch);  // outside the graph: the copy stream's event
  timer.data_ready();
  // Read by the graph's update: the coefficients of this step's update (the last replay is done).
  optimizer_->set_captured_lr(static_cast<float>(lr_at_step(state_.global_step)));
  phases.next("captured step", "step");
  const void* key = x;  // a graph per input slot: the graph reads its slot's buffers
  if (!graphs.ready(key)) {
    std::string why;
    graphs.begin();
    timer.begin_capture(key);
    try {
      record_step(x, scale);
      why = graphs.end(key);
    } catch (const std::exception& e) {
      graphs.abort();
      m.reducer->drain();
      // A peer that never came, or a communicator that failed, is no capture problem: going on
      // without graphs would only fail later on a dead communicator, with a misleading message.
      if (dynamic_cast<const TimeoutError*>(&e) != nullptr || !grad_comm_.lost().empty()) throw;
      why = e.what();
    }
    // Every rank captures, or none does: a rank that runs the step uncaptured issues its
    // collectives from the host, so the others must too.
    const std::optional<FirstProblem> problem = first_problem(comm_, why.empty(), why);
    timer.end_capture(!problem.has_value());
    if (problem) {
      graphs.clear();
      timer.forget_captures();
      m.graphs = nullptr;
      if (comm_.rank() == 0) {
        LS_LOG(warn) << "capturing the training step in a CUDA graph failed on rank "
                     << problem->rank << " (" << problem->message
                     << "); the run goes on without graphs";
      }
      return false;
    }
  } else {
    timer.replayed(key);
  }
  graphs.launch(key, m.batch);
  m.step->release();
  // The next step's first micro-batch is taken and staged while the graph runs.
  m.ahead = m.train->next(m.next);
  if (m.ahead) m.step->stage(m.next);
  phases.next("step wait", "step");
  // The host waits for the step, watched as its collectives would be (a dead peer aborts NCCL).
  if (grad_comm_.capturable())
    grad_comm_.watch_stream(m.stream, "the captured training step")->wait(grad_comm_.timeout());
  else
    kernels::cuda_stream_synchronize(m.stream);
  timer.collect(/*synced=*/true);
  o = graphs.outcome();
  m.guard->before_reduce(o.totals.loss_sum);
  return true;
}

void Trainer::record_step(const float* x, float scale) {
  Impl& m = *impl_;
  StepTimer& timer = *m.timer;
  const int rows = static_cast<int>(m.batch.rows);
  if (m.capture_fail_rank == comm_.rank())
    throw Error("test hook LOCKSTEP_TEST_CAPTURE_FAIL_RANK: the capture fails on this rank");
  timer.forward_begin();
  model_->zero_grads();
  m.reducer->start_step(model_->grads(), /*captured=*/true);
  const float* out = model_->forward(x, rows);
  m.step->loss(m.batch, out, scale, model_->output_grad());
  m.graphs->share_loss(grad_comm_);
  timer.forward_end();
  model_->backward(rows, [&](int layer) { m.reducer->layer_done(layer); });
  timer.backward_end();
  m.reducer->join();
  timer.reduced();
  m.graphs->gradient_norm(model_->grads(), model_->param_count());
  if (config_.clip_norm > 0)
    m.step->clip(model_->grads(), model_->param_count(), config_.clip_norm);
  optimizer_->step_captured(model_->params(), model_->grads(), m.graphs->gate(),
                            m.graphs->gates());
  timer.updated();
}

void Trainer::micro_batch(float scale, bool last, NvtxPhases& phases) {
  Impl& m = *impl_;
  StepTimer& timer = *m.timer;
  const float* x = m.step->upload(m.batch);
  timer.data_ready();
  phases.next("forward", "forward");
  timer.forward_begin();
  const int rows = static_cast<int>(m.batch.rows);
  const float* out = model_->forward(x, rows);
  m.step->loss(m.batch, out, scale, model_->output_grad());
  timer.forward_end();
  phases.next("backward", "backward");
  // Only the last micro-batch's backward finishes the gradients, so only it starts reductions.
  if (last)
    model_->backward(rows, [&](int layer) {
      timer.backward_progress();
      m.reducer->layer_done(layer);
    });
  else
    model_->backward(rows);
  m.step->release();
  timer.backward_end();
}

Step::Outcome Trainer::reduce_gradients(NvtxPhases& phases) {
  Impl& m = *impl_;
  // The guard's flags travel with the gradients when the local loss is known before they are
  // reduced; otherwise they leave after the step's read-back (a round trip more).
  const LossTotals* early = m.step->totals_before_reduce();
  if (early != nullptr) m.guard->before_reduce(early->loss_sum);
  m.reducer->wait_all();
  m.timer->reduced();
  // The next step's first micro-batch is taken and staged now: after the reduction has completed
  // on the host, so that no collective is in flight into the gradients should the read fail, and
  // before finish() waits for the device, whose work the copy overlaps (at an epoch's end there is
  // none).
  m.ahead = m.train->next(m.next);
  if (m.ahead) m.step->stage(m.next);
  m.timer->ahead_taken();
  phases.next("optimizer", "optimizer");
  const Step::Outcome o = m.step->finish(model_->grads(), model_->param_count());
  m.timer->collect(/*synced=*/true);  // on a device, finish() has waited for the stream
  if (early == nullptr) m.guard->before_reduce(o.totals.loss_sum);
  return o;
}

void Trainer::update() {
  Impl& m = *impl_;
  if (config_.clip_norm > 0)
    m.step->clip(model_->grads(), model_->param_count(), config_.clip_norm);
  GpuSpan span(m.step->trace(), "optimizer update", "optimizer");
  optimizer_->step(model_->params(), model_->grads(),
                   static_cast<float>(lr_at_step(state_.global_step)));
}

EvalResult Trainer::evaluate() {
  TraceSpan span("evaluate", "evaluation");
  Impl& m = *impl_;
  // The first evaluation reads the test split (held in memory: all of it at its first batch).
  const bool first = m.startup.count() > 0 && !m.evaluated;
  if (first) apply_timeout(m.startup);
  m.test->start_epoch(0);
  while (m.test->next(m.batch)) {
    const float* out = model_->forward(m.step->upload(m.batch), static_cast<int>(m.batch.rows));
    m.step->loss(m.batch, out, 0.0f, nullptr);
    m.step->release();
  }
  LossTotals t = m.step->finish(nullptr, 0).totals;
  sum_over_ranks(comm_, t);
  EvalResult e;
  e.samples = static_cast<int64_t>(t.samples) / m.info.positions;  // rows; t counts predictions
  e.loss = t.mean_loss();
  e.accuracy = t.accuracy();
  m.last_eval_step = static_cast<double>(state_.global_step);
  m.last_eval = e;
  m.evaluated = true;
  if (first && m.startup_steps_left == 0) apply_timeout(m.steady);
  return e;
}

void Trainer::observe_step(const LossTotals& step) {
  const int64_t done = state_.global_step;
  if (config_.check_every > 0 && done % config_.check_every == 0)
    verify_replicas("at step " + std::to_string(done));
  impl_->reporter->after_step(state_, step, times_, lr_at_step(done - 1));
}

bool Trainer::act_on(Verdict v) {
  StepGuard& guard = *impl_->guard;
  if (v == Verdict::save || (v == Verdict::stop && guard.keeps_checkpoints())) save_checkpoint();
  if (v != Verdict::stop) return false;
  guard.report_stop(state_.global_step);
  return true;
}

void Trainer::save_checkpoint() {
  TraceSpan span("checkpoint", "checkpoint");
  const int64_t step = state_.global_step;
  verify_replicas("before the checkpoint at step " + std::to_string(step));
  const TrainingParts parts{config_, state_, *model_, *optimizer_, steps_per_epoch(),
                            impl_->info.rows};
  impl_->guard->saved(step, write_checkpoint(parts, comm_, config_.guard));
}

bool Trainer::run_epoch(EpochSummary& s) {
  Impl& m = *impl_;
  m.train->start_epoch(state_.epoch, state_.step_in_epoch * config_.grad_accum);
  m.ahead = false;  // the loader starts over; a batch taken before belongs to the old position
  const StepTimes epoch_start = times_;
  LossTotals epoch;
  Stopwatch clock;
  while (state_.step_in_epoch < m.steps_per_epoch && state_.global_step < total_steps()) {
    const LossTotals step = train_step();
    epoch += step;
    observe_step(step);
    if (act_on(m.guard->after_step(state_.global_step, total_steps()))) break;
  }
  if (m.guard->stopped_early()) return false;
  s = m.reporter->epoch_summary(state_, epoch, times_.minus(epoch_start));
  if (config_.eval_every_epoch) s.test = evaluate();
  s.seconds = clock.seconds();
  if (config_.eval_every_epoch) m.reporter->epoch_end(s);
  if (state_.step_in_epoch == m.steps_per_epoch) {
    state_.epoch += 1;
    state_.step_in_epoch = 0;
  }
  return true;
}

TrainResult Trainer::run() {
  Impl& m = *impl_;
  if (!initialized_)
    init_params();
  else
    verify_replicas("when resuming");
  TrainResult result;
  const StepTimes at_start = times_;
  m.reporter->start(times_);
  while (state_.global_step < total_steps()) {
    EpochSummary s;
    if (!run_epoch(s)) break;
    result.epochs.push_back(s);
  }
  m.reporter->finish_line();
  m.timer->flush();  // a GPU's last phases, before the times are read
  verify_replicas("at the end of training");
  act_on(m.guard->at_end(state_.global_step));
  if (!m.guard->stopped_early())
    result.test = m.last_eval_step == static_cast<double>(state_.global_step) ? m.last_eval
                                                                             : evaluate();
  result.times = times_.minus(at_start);
  result.samples_per_second =
      result.times.total > 0 ? static_cast<double>(result.times.samples) / result.times.total : 0;
  return result;
}

}  // namespace lockstep
