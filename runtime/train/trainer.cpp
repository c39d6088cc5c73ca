// Trainer (trainer.h): construction, the run, evaluation, checkpoints and deadlines; one training
// step is trainer_step.cpp's, the memory it holds trainer_memory.cpp's.
#include "runtime/train/trainer.h"

#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <utility>

#include "runtime/base/error.h"
#include "runtime/base/log.h"
#include "runtime/comm/agree.h"
#include "runtime/comm/replica_check.h"
#include "runtime/model/sample_text.h"
#include "runtime/observe/trace.h"
#include "runtime/train/checkpoint_dir.h"
#include "runtime/train/device_step.h"
#include "runtime/train/train_checkpoint.h"
#include "runtime/train/train_checks.h"
#include "runtime/train/trainer_impl.h"

namespace lockstep {

Trainer::Trainer(Communicator& host, Communicator& grads, const TrainConfig& config)
    : comm_(host), grad_comm_(grads), config_(config), impl_(std::make_unique<Impl>()) {
  impl_->hooks = TrainTestHooks::from_environment();
  // Loss sums, flags and checksums are host values, and so are a CPU model's gradients: a device-
  // buffer communicator is refused here, identically on every rank, before any collective.
  require_host_buffers(comm_, "the trainer");
  if (grad_comm_.size() != comm_.size() || grad_comm_.rank() != comm_.rank())
    throw Error("the trainer's gradient communicator (rank " + std::to_string(grad_comm_.rank()) +
                " of " + std::to_string(grad_comm_.size()) +
                ") is not over the ranks of its host "
                "communicator (rank " +
                std::to_string(comm_.rank()) + " of " + std::to_string(comm_.size()) + ")");
  std::string problem;
  try {
    build();
  } catch (const UsageError& e) {
    problem = e.what();
  }
  agree_or_throw(comm_, problem.empty(), problem);
  for (ShardedLoader* split : {impl_->train.get(), impl_->test.get()})
    require_same_split(comm_, *split);
  impl_->dir_lock = prepare_checkpoint_dir(config_.guard, comm_);
}

void Trainer::build() {
  Impl& m = *impl_;
  validate(config_, comm_.size());
  if (config_.device == DeviceKind::cuda) require_cuda_training();
  ModelSpec spec = parse_model_spec(config_.model);
  m.info = inspect_training_data(config_);  // resolves --loss auto (train_checks.h)
  if (config_.sample_every > 0) check_sample_options(m.info);
  m.classification = m.info.classification;
  m.outputs = m.classification ? m.info.num_classes : m.info.target_dim;
  const int64_t B = config_.global_batch;
  m.micro_rows = B / config_.grad_accum / comm_.size();
  m.steps_per_epoch = config_.drop_remainder ? m.info.rows / B : (m.info.rows + B - 1) / B;
  check_batch_fits(config_, m.info, m.outputs, m.micro_rows);
  open_loaders();  // opens the files only: a split held in memory is read at its first batch
  if (const uint64_t held = m.train->held_bytes() + m.test->held_bytes(); held > 0)
    check_batch_fits(config_, m.info, m.outputs, m.micro_rows, held);

  const SampleShape input = sample_shape_of(m.info);
  const int rows = static_cast<int>(m.micro_rows);
  const int positions = m.info.positions;
  m.step =
      make_step(config_.device, {shape_size(input), m.outputs, rows, m.classification, positions});
  // CUDA graphs: the options and the backend decide, so every rank reaches the same answer. ZeRO
  // stage 1 is captured too (its norm, clipping, update and all-gathers on the device: zero.h);
  // stage 2's reducer waits on the host for each slot's reduction and is not.
  const bool graphs = config_.device == DeviceKind::cuda && config_.cuda_graphs &&
                      config_.grad_accum == 1 && config_.zero < 2 &&
                      (grad_comm_.capturable() || grad_comm_.size() == 1);
  ModelPlacement place = m.step->placement(config_.precision);
  place.graphs = graphs;
  place.shard_ranks = config_.zero > 0 ? comm_.size() : 1;
  place.own_gradients = config_.zero < 2;  // stage 2: the reducer's staging holds them
  place.recompute = config_.recompute;
  // bf16 on a GPU: one bf16 copy of the parameters, written by the update (not under ZeRO, whose
  // other blocks arrive by all-gather; its bf16 wire keeps a copy of its own). No CPU lanes under
  // ZeRO, chosen for its memory: each lane beyond the first holds a whole gradient (model.h).
  place.bf16_params = config_.zero == 0 && place.knobs.cuda_bf16_weights == Bf16WeightsKnob::update;
  place.lanes = config_.zero > 0 ? 1 : place.lanes;
  m.timer = std::make_unique<StepTimer>(times_, hook_, m.step->timer());
  model_ = std::make_unique<Model>(spec, input, m.outputs, rows, place, positions);
  m.reducer = std::make_unique<BucketReducer>(
      grad_comm_, assign_buckets(model_->layer_spans(), bucket_bytes_from_mb(config_.bucket_mb)),
      config_.grad_reduce_dtype, place.device, place.stream, config_.zero, model_->tie_targets());
  if (config_.zero == 2)
    model_->bind_gradients([&m](size_t offset) { return m.reducer->gradient_at(offset); });
  const ParamRanges decayed = matrix_ranges(model_->param_tensors());  // adamw: matrices only
  if (config_.zero > 0) {
    m.zero = std::make_unique<ZeroShard>(grad_comm_, comm_, *m.reducer, place.device, place.stream,
                                         gather_precision(config_));
    optimizer_ =
        std::make_unique<Optimizer>(config_.optimizer, m.zero->owned(), place.device, place.stream);
    optimizer_->set_segments(m.zero->segments(), m.zero->compact_grads(), m.zero->rounds());
    optimizer_->set_decay_ranges(m.zero->to_compact(decayed));
  } else {
    optimizer_ = std::make_unique<Optimizer>(config_.optimizer, model_->param_count(), place.device,
                                             place.stream);
    optimizer_->set_decay_ranges(decayed);
    optimizer_->set_params16(model_->params16());  // null unless the model keeps the copy
  }
  if (config_.grad_reduce_dtype == Precision::bf16 && grad_comm_.backend() == Backend::nccl &&
      grad_comm_.size() >= 16 && comm_.rank() == 0) {
    LS_LOG(debug) << "--grad-reduce-dtype bf16 over NCCL at " << grad_comm_.size()
                  << " ranks: NCCL rounds every partial sum to bf16 (a ring adds "
                  << grad_comm_.size() - 1 << " times), so the reduced gradient carries more "
                  << "rounding than at a few ranks; fp32 on the wire keeps it exact to fp32";
  }
  if (graphs && m.step->graphs() != nullptr && m.reducer->capturable())
    m.graphs = std::make_unique<GraphRunner>(*m.step->graphs(), place.stream, comm_, grad_comm_,
                                             *m.reducer, *m.timer, m.hooks.capture_fail_rank);

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
  ro.metrics_path =
      comm_.rank() == 0 ? config_.metrics_path : "";  // rank 0 writes, printing or not
  ro.append_metrics = config_.append_metrics;
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
  lo.rows_per_step = config_.global_batch / config_.grad_accum;
  lo.seed = config_.seed;
  lo.shuffle = config_.shuffle;
  lo.drop_remainder = config_.drop_remainder;
  lo.prefetch = config_.prefetch;
  lo.in_memory_bytes = config_.data_in_memory_mb << 20;
  m.train = std::make_unique<ShardedLoader>(config_.train, lo, rank, P);
  LoaderOptions eo = lo;
  eo.rows_per_step = m.micro_rows * P;
  eo.shuffle = false;
  eo.drop_remainder = false;
  m.test = std::make_unique<ShardedLoader>(test_split_spec(config_), eo, rank, P);
}

Trainer::~Trainer() {
  // Before the model's and the optimizer's buffers go (freeing device memory waits for the
  // device, which may be running a replay whose peers never launched theirs).
  if (impl_ && impl_->graphs) impl_->graphs->settle_if_unwinding();
  // A rank that fails mid-step (a data error, a peer past its deadline) unwinds with collectives
  // still queued or running on a progress thread, or given up on and still started, on the
  // parameters, the gradient buckets and the guard's flags: MPI would read and write them freed.
  // The process is ending with that error, so they are kept for the rest of it instead.
  if (!comm_.quiet() || !grad_comm_.quiet()) {
    static_cast<void>(impl_.release());
    static_cast<void>(model_.release());
    static_cast<void>(optimizer_.release());
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
  if (impl_->zero) impl_->zero->adopt(*model_);  // a bf16 all-gather: masters, rounded params
  initialized_ = true;
  verify_replicas("after the initial broadcast");
}

void Trainer::restore(const TrainState& state) {
  if (impl_->zero) impl_->zero->adopt(*model_);  // the checkpoint's parameters are the masters
  state_ = state;
  initialized_ = true;
}

void Trainer::sync_params() {
  if (impl_->zero) impl_->zero->wait();
}

std::vector<std::vector<float>> Trainer::optimizer_state() {
  sync_params();
  std::vector<std::vector<float>> out;
  for (StateBuffer& buf : optimizer_->state())
    out.push_back(impl_->zero ? impl_->zero->full(*buf.data, model_->param_count())
                              : buf.data->to_host());
  return out;
}

std::vector<float> Trainer::params_to_save() {
  sync_params();
  if (impl_->zero && impl_->zero->rounds())
    return impl_->zero->full(impl_->zero->masters(), model_->param_count());
  return model_->params_to_host();
}

void Trainer::load_optimizer_state(size_t index, const std::vector<float>& whole) {
  std::vector<StateBuffer> state = optimizer_->state();
  if (index >= state.size() || whole.size() != model_->param_count())
    throw Error("load_optimizer_state: buffer " + std::to_string(index) + " of " +
                std::to_string(whole.size()) + " floats does not fit");
  if (impl_->zero)
    impl_->zero->take(whole, *state[index].data);
  else
    state[index].data->write(whole.data(), 0, whole.size());
}

void Trainer::verify_replicas(const std::string& when) {
  sync_params();
  check_replicas(comm_, model_->params_to_host(), when);  // a copy down from a GPU
}

EvalResult Trainer::evaluate() {
  TraceSpan span("evaluate", "evaluation");
  Impl& m = *impl_;
  sync_params();
  // The first evaluation reads the test split (held in memory: all of it at its first batch).
  const bool first = m.startup.count() > 0 && !m.evaluated;
  if (first) apply_timeout(m.startup);
  m.test->start_epoch(0);
  for (int64_t batches = 0;
       (config_.eval_steps == 0 || batches < config_.eval_steps) && m.test->next(m.batch);
       ++batches) {
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
  if (config_.sample_every > 0 && done % config_.sample_every == 0) print_sample();
}

void Trainer::check_sample_options(const DatasetInfo& info) const {
  if (info.positions <= 1)
    throw UsageError(
        "--sample-every needs a language model on token data (a gpt: model on a "
        "split with tokens); " +
        info.path + ":" + info.group + " holds " + info.x_name);
  if (info.num_classes > 256)
    throw UsageError("--sample-every prints bytes, and the " + std::to_string(info.num_classes) +
                     "-token vocabulary of " + info.path + " is not bytes (at most 256 tokens)");
  if (config_.sample_prompt.empty()) throw UsageError("--sample-prompt must not be empty");
  for (unsigned char c : config_.sample_prompt)
    if (c >= info.num_classes)
      throw UsageError("--sample-prompt holds byte " + std::to_string(c) + ", outside the " +
                       std::to_string(info.num_classes) + "-token vocabulary of " + info.path);
}

// Every rank samples the same text (the same parameters and generator: no collective needed, and
// the ranks stay in step); rank 0 prints it.
void Trainer::print_sample() {
  TraceSpan span("sample", "sample");
  std::vector<int> text(config_.sample_prompt.begin(), config_.sample_prompt.end());
  for (int& c : text) c = static_cast<unsigned char>(c);
  std::mt19937_64 rng(config_.seed + static_cast<uint64_t>(state_.global_step));
  std::string out;
  generate_tokens(*model_, impl_->info.positions, impl_->info.num_classes, text,
                  config_.sample_bytes, {}, rng,
                  [&](int token) { out += static_cast<char>(token); });
  if (comm_.rank() == 0)  // asked for by name: printed whatever --progress says
    std::printf("sample at step %lld: %s\n", static_cast<long long>(state_.global_step),
                out.c_str());
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
  const std::vector<std::vector<float>> whole = optimizer_state();  // collective under --zero
  const std::vector<float> params = params_to_save();               // likewise
  TrainingParts parts{config_, state_, *model_, *optimizer_, steps_per_epoch(), impl_->info.rows};
  parts.whole_state = &whole;
  parts.whole_params = &params;
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
    // --eval-every, where neither the epoch nor the run ends here (their evaluation follows).
    if (config_.eval_every > 0 && config_.eval_every_epoch &&
        state_.global_step % config_.eval_every == 0 && state_.step_in_epoch < m.steps_per_epoch &&
        state_.global_step < total_steps())
      m.reporter->step_eval(state_, evaluate());
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
  if (!m.guard->stopped_early() && config_.eval_at_end)
    result.test =
        m.last_eval_step == static_cast<double>(state_.global_step) ? m.last_eval : evaluate();
  result.times = times_.minus(at_start);
  result.samples_per_second =
      result.times.total > 0 ? static_cast<double>(result.times.samples) / result.times.total : 0;
  return result;
}

}  // namespace lockstep
