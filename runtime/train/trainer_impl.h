// The Trainer's private state (trainer.h), shared by its two sources: trainer.cpp (construction,
// the run, evaluation, checkpoints) and trainer_step.cpp (one training step, eager or replayed).
// Internal to runtime/train/ (not installed); the training thread's, as the Trainer is. No calls.
#pragma once

#include <memory>

#include "runtime/comm/buckets.h"
#include "runtime/data/sharded_loader.h"
#include "runtime/observe/step_timer.h"
#include "runtime/train/checkpoint_dir.h"
#include "runtime/train/graph_step.h"
#include "runtime/train/run_reporter.h"
#include "runtime/train/step.h"
#include "runtime/train/test_hooks.h"
#include "runtime/train/trainer.h"
#include "runtime/train/zero.h"

namespace lockstep {

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
  double last_eval_step = -1;        // global step of the last evaluation
  EvalResult last_eval;
  std::unique_ptr<StepGuard> guard;
  std::unique_ptr<BucketReducer> reducer;
  // Full steps replayed from CUDA graphs (DESIGN.md decision 18); null where steps cannot be
  // captured. After the reducer, which it drains, and before it goes.
  std::unique_ptr<GraphRunner> graphs;
  // --zero 1: this rank's share of the update (zero.h); the norm of the whole reduced gradient
  // of the step in progress.
  std::unique_ptr<ZeroShard> zero;
  double zero_norm = 0;
  TrainTestHooks hooks;        // read once, at construction
  CheckpointDirLock dir_lock;  // rank 0's, on --checkpoint-dir, while the Trainer lasts
  // Deadlines (set_deadlines): zero until set; the start-up steps still to run and whether the
  // first evaluation is done.
  Millis steady{0}, startup{0};
  int64_t startup_steps_left = 0;
  bool evaluated = false;
};

}  // namespace lockstep
