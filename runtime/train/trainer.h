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
#include "runtime/train/train_config.h"
#include "runtime/train/train_state.h"

namespace lockstep {

class NvtxPhases;

struct TrainResult {
  std::vector<EpochSummary> epochs;
  EvalResult test;  // at the end
  StepTimes times;  // this rank's, over the whole run
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
  // The optimizer's state buffers as a checkpoint holds them: whole, each as long as the flat
  // parameter buffer, in Optimizer::state() order. Collective under --zero 1 (every rank's blocks
  // gathered); a copy otherwise. load_optimizer_state writes a whole buffer `index` back (each
  // rank keeping its blocks under --zero 1).
  std::vector<std::vector<float>> optimizer_state();
  void load_optimizer_state(size_t index, const std::vector<float>& whole);
  // The parameters a checkpoint holds, whole: the model's, or under a bf16 all-gather
  // (--gather-dtype) the fp32 master weights of every rank's blocks (collective then).
  std::vector<float> params_to_save();
  // Per rank, in bytes: the flat parameters (fp32: the master weights), the flat gradients and the
  // optimizer state (1/P of it under --zero 1).
  struct MemoryUse {
    uint64_t params = 0, grads = 0, state = 0;
    uint64_t masters = 0;  // --gather-dtype bf16: this rank's fp32 masters and the bf16 wire buffer
    uint64_t copy16 = 0;   // bf16 runs without ZeRO: the bf16 copy the update writes (params16)
    uint64_t lane_grads = 0;  // of grads: the CPU lanes' beyond the first (model.h)
  };
  MemoryUse memory_use();
  // "parameters 0.20 MB, gradients 0.20 MB, optimizer state 0.40 MB (...)": memory_use() in words.
  std::string memory_text();

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
  LossTotals train_step();    // one update; its totals (none when skipped)
  bool take_batch();          // the staged next batch, or the loader's; false at the epoch's end
  void inject_test_faults();  // test_hooks.h, before a step
  void check_valid(int64_t got, int64_t want) const;  // the loader gave the step's rows
  // The step's work, written once for both ways a step runs (step.h, StepMode): begin_step zeroes
  // the gradients and starts the buckets; micro_batch_work runs one micro-batch's forward, loss
  // and backward, handing finished layers to the buckets on the last; apply_update clips and
  // updates (eager: at the host's word; recording: gated on the device).
  void begin_step(StepMode mode);
  // The reduced gradient the update reads: the model's flat buffer, or at ZeRO stage 2 the
  // reducer's compact blocks of this rank.
  float* reduced_grads();
  void micro_batch_work(const float* x, float scale, bool last, StepMode mode, NvtxPhases* phases);
  void apply_update(StepMode mode);
  // Eager: every micro-batch, then the gradients reduced and read back.
  Step::Outcome eager_step(float scale, bool have, int64_t want_valid, NvtxPhases& phases);
  Step::Outcome reduce_gradients(NvtxPhases& phases);
  // Replayed (graph_step.h): false, on every rank, when a capture failed (the step has not run:
  // the caller runs it eagerly). record_step is the step's work into the capture.
  bool graph_step(float scale, NvtxPhases& phases, Step::Outcome& o);
  void record_step(const float* x, float scale);
  void confirm_captured_update(bool apply);   // the graph's update against the agreed verdict
  void observe_step(const LossTotals& step);  // replica check and reports after a step
  void check_sample_options(const DatasetInfo& info) const;  // --sample-every's rules
  void print_sample();                                       // --sample-every's text
  bool act_on(Verdict v);                                    // true: the run ends
  void save_checkpoint();
  bool run_epoch(EpochSummary& s);  // false: stopped early
  void apply_timeout(Millis t);     // both communicators' deadline
  void sync_params();               // --zero: the last update's all-gathers done

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
