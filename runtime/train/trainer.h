// Trainer: the synchronous data-parallel training loop (DESIGN.md decisions 5 and 7).
//
// Every rank builds the same Trainer over the same TrainConfig and calls the same methods in the
// same order; each method that says "collective" must be called on every rank. A step: up to
// grad_accum micro-batches of B/(P*K) rows each on this rank (forward, loss, backward, gradients
// accumulated), all-reduce SUM of the flat gradient buffer in buckets (buckets.h) started while the
// last micro-batch's backward pass runs, one optimizer update. The loss
// gradient is scaled by 1/(valid samples in the whole global batch), so the applied gradient is
// the gradient of the mean loss over the global batch at any P and K, a masked last batch included.
//
// Parameters are initialised from the seed on rank 0, broadcast, and verified by checksum on
// every rank; the check repeats every check_every steps and at the end (a mismatch throws Error
// naming the ranks). Evaluation scores the test split with every rank taking a slice.
//
// The state a checkpoint needs is reachable: model() (flat parameters), optimizer() (its state
// buffers and step count), state() (epoch, step, position), config() (the seed drives both the
// initialisation and each epoch's shuffle, so nothing else is random). restore() continues a run.
// Devices (TrainConfig::device): the device-specific part of every step is a Step (step.h), made
// once here: a HostStep on the CPU, a DeviceStep on cuda, where the model, its gradients, the
// optimizer state and the loss totals live on the current CUDA device. The guard (step_guard.h)
// decides what happens around a step and the trainer acts on its verdicts (it writes the
// checkpoints, train_checkpoint.h); the gradient buckets are reduced over the gradient
// communicator, in place when it takes device buffers (nccl; mpi staging them), else copied
// through host memory. Loss sums, flags, checksums and agreements are host values: they go over
// the host communicator (comm()), which the caller passes explicitly (Context::host); the trainer
// makes no communicator of its own.
// model().params() are then device pointers; params_to_host() copies them down. On cuda a full
// step of one micro-batch is captured in a CUDA graph and replayed (TrainConfig::cuda_graphs;
// DESIGN.md decision 18), with the same results.
//
// Used by one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/base/communicator.h"
#include "runtime/base/device_kind.h"
#include "runtime/base/precision.h"
#include "runtime/data/dataset.h"
#include "runtime/model/lr_schedule.h"
#include "runtime/model/model.h"
#include "runtime/model/optimizer.h"
#include "runtime/observe/progress.h"
#include "runtime/observe/step_times.h"
#include "runtime/train/step.h"
#include "runtime/train/step_guard.h"
#include "runtime/train/train_state.h"

namespace lockstep {

class NvtxPhases;

enum class LossKind { automatic, cross_entropy, mse };
LossKind parse_loss(const std::string& text);  // auto | cross-entropy | mse; UsageError naming --loss
const char* loss_name(LossKind k);

// A run's settings. These member initialisers are the options' defaults: lockstep-train --help
// shows them through the option table (config_table.h), which names each option's member.
struct TrainConfig {
  DatasetSpec train;                 // group "train" by default
  std::string test_group = "test";   // the same file's split that evaluate() scores
  std::string model = "cnn";
  LossKind loss = LossKind::automatic;  // cross-entropy for labels, mse for float targets
  OptimizerConfig optimizer;
  double lr = 1e-3;
  LrScheduleKind lr_schedule = LrScheduleKind::constant;
  int64_t warmup_steps = 0;
  double min_lr = 0.0;
  LrScaling lr_scaling = LrScaling::none;
  int64_t base_batch = 256;
  int64_t global_batch = 128;  // B: samples per update over all ranks
  int epochs = 5;
  int64_t steps = 0;           // > 0: stop after this many updates (overrides epochs)
  int grad_accum = 1;          // K micro-batches of B/K per update
  double bucket_mb = 25;       // gradient bucket size in MiB (0: one all-reduce after backward)
  DeviceKind device = DeviceKind::cpu;            // where the layers compute
  Precision precision = Precision::fp32;          // compute dtype; bf16 needs device cuda
  Precision grad_reduce_dtype = Precision::fp32;  // dtype of the gradient all-reduce on the wire
  // cuda: capture each full training step of one micro-batch in a CUDA graph and replay it
  // (DESIGN.md decision 18), where the gradient communicator allows (Communicator::capturable).
  bool cuda_graphs = true;
  uint64_t seed = 0;
  bool shuffle = true;
  bool drop_remainder = false;
  double clip_norm = 0.0;      // > 0: clip the averaged gradient to this global L2 norm
  int64_t log_every = 50;      // steps between reduced loss/accuracy reports
  int64_t check_every = 100;   // steps between replica checks (0: only at start and end)
  int64_t straggler_every = 100;  // steps between straggler reports (straggler.h; 0: none)
  bool eval_every_epoch = true;
  int prefetch = 2;
  // Each split of at most this many MiB as stored is read whole into memory once (every rank
  // holds it); 0: each batch reads its rows from the file (ShardedLoader).
  int64_t data_in_memory_mb = kDefaultInMemoryBytes >> 20;
  std::string metrics_path;    // JSON lines, written by rank 0; empty: none
  bool print = true;           // rank 0 prints progress and epoch lines
  int host_ranks = 1;          // ranks sharing this host's memory (World::local_size; the program)
  bool progress_bar = false;   // a redrawn bar (a terminal) instead of plain lines
  GuardOptions guard;          // checkpoints, stop signals, NaN policy (step_guard.h)
};

// Checks the values a user sets, each in words naming its option, for a world of `world_size`
// ranks (throws UsageError): every option's rule from its row (config_table.h), then the rules
// across options.
void validate(const TrainConfig& c, int world_size);

struct TrainResult {
  std::vector<EpochSummary> epochs;
  EvalResult test;   // at the end
  StepTimes times;   // this rank's, over the whole run
  double samples_per_second = 0;
};

class Trainer {
 public:
  // Collective. Validates the configuration against the data and the world, opens the data,
  // builds the model and optimizer; every rank throws the same UsageError when anything does not
  // fit. Does not initialise the parameters yet (run() does, unless restore() was called).
  // `host` carries the host values (loss sums, flags, checksums, agreement) and must take host
  // buffers; `grads` reduces the gradients, and may take device buffers only (NCCL, MPI staging)
  // with device cuda. Both span the same ranks (Context::host and Context::grads). The second form
  // uses one communicator for both (the CPU's case). Both must outlive the Trainer.
  Trainer(Communicator& host, Communicator& grads, const TrainConfig& config);
  Trainer(Communicator& comm, const TrainConfig& config) : Trainer(comm, comm, config) {}
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Collective: trains until the configured epochs or steps, evaluating after each epoch and at
  // the end; or until an agreed stop signal ends it early (guard().stopped_early(); no final
  // evaluation then).
  TrainResult run();
  // Collective: loss and accuracy on the test split, each rank scoring its slice.
  EvalResult evaluate();
  // Collective: initialise from the seed on rank 0, broadcast, verify.
  void init_params();
  // Collective: compares a checksum of the parameters across ranks; throws Error naming the
  // ranks that differ from rank 0. `when` goes into the message ("at step 300").
  void verify_replicas(const std::string& when);
  // Continue from `state`: every rank has written model().params() and the optimizer state (and
  // step count) already. run() then skips the initialisation (it still verifies the replicas).
  void restore(const TrainState& state);

  int64_t steps_per_epoch() const;
  int64_t total_steps() const;
  double lr_at_step(int64_t global_step) const;

  Model& model() { return *model_; }
  Optimizer& optimizer() { return *optimizer_; }
  const TrainState& state() const { return state_; }
  const TrainConfig& config() const { return config_; }
  const DatasetInfo& train_info() const;
  const StepTimes& times() const { return times_; }
  // Steps run as a replay of a CUDA graph (DESIGN.md decision 18), the capture's first launch
  // included; 0 without --cuda-graphs or where the step cannot be captured.
  int64_t captured_steps() const { return captured_steps_; }
  const StepGuard& guard() const;  // stop signal agreed, stopped early, steps skipped, checkpoint
  Communicator& comm() { return comm_; }  // host values' communicator: every collective above
  // Collective deadlines (DESIGN.md decision 8): `steady` for the steps; `startup` (the larger
  // one counts) for one-off work that ranks may reach minutes apart: the first kStartupSteps steps
  // of run() (a split held in memory read at the first batch, cuDNN's first use and kernel timing,
  // NCCL's lazy connections, the first capture) and the first evaluation (the test split's read).
  // Sets both communicators to the start-up deadline now, so that resuming runs under it too
  // (make_context leaves them there for construction). Without it both keep what they were given.
  void set_deadlines(Millis steady, Millis startup);
  Millis steady_timeout() const;  // the steps' deadline (the host communicator's, if none set)
  static constexpr int64_t kStartupSteps = 3;
  void set_phase_hook(PhaseHook hook) { hook_ = std::move(hook); }

 private:
  struct Impl;
  void build();
  void open_loaders();
  LossTotals train_step();  // one update; its totals (none when skipped)
  void micro_batch(float scale, bool last, NvtxPhases& phases);
  bool take_batch();  // the staged next batch, or the loader's; false at the epoch's end
  // A full step of one micro-batch through the step's CUDA graphs (DESIGN.md decision 18):
  // captured at its first use for the batch's input slot, then replayed. False, on every rank,
  // when a capture failed (the step has not run: the caller runs it uncaptured).
  bool captured_step(float scale, NvtxPhases& phases, Step::Outcome& o);
  void record_step(const float* x, float scale);  // the step's work, into the capture
  Step::Outcome reduce_gradients(NvtxPhases& phases);
  void update();
  void observe_step(const LossTotals& step);  // replica check and reports after a step
  bool act_on(Verdict v);   // true: the run ends
  void save_checkpoint();
  bool run_epoch(EpochSummary& s);  // false: stopped early
  void apply_timeout(Millis t);     // both communicators' deadline

  Communicator& comm_;       // host values
  Communicator& grad_comm_;  // the gradient buckets
  TrainConfig config_;
  std::unique_ptr<Impl> impl_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Optimizer> optimizer_;
  TrainState state_;
  StepTimes times_;
  PhaseHook hook_;
  bool initialized_ = false;
  int64_t captured_steps_ = 0;
};

}  // namespace lockstep
