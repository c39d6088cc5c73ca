// Between a Trainer and a CheckpointState: what a checkpoint of a training run holds, and how a run
// continues from one.
//
// Captured: the parameters by the model's tensor names ("dense0.weight", ...), each optimizer
// buffer split the same way ("velocity/dense0.weight", "adam_m/...", "adam_v/..."), the optimizer's
// update count, the position (epoch, step in epoch, global step, samples seen), the seed (it fixes
// the initialisation and every epoch's shuffle, the only randomness in a run), the canonical model
// spec, the run's options as text, and the world size. A position at the end of an epoch is stored
// as the start of the next one.
//
// Resuming checks, besides the file itself (checkpoint.h): the model (spec and every shape), the
// optimizer (its buffers), and the options that decide which samples each step sees: global batch,
// seed, shuffle, remainder and the training set's row count. The world size may differ: the
// sequence of global batches does not depend on it (DESIGN.md decision 5).
//
// The Trainer saves through write_checkpoint() over its TrainingParts, so this file calls nothing
// of the Trainer's to write one; the Trainer& forms are for the code above it (resuming, reports).
// Used by the training thread.
// Collective: write_checkpoint() and the resume, on every rank at the same point; the rest
// is rank-local.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/base/communicator.h"
#include "runtime/train/checkpoint.h"
#include "runtime/train/step_guard.h"

namespace lockstep {

class Model;
class Optimizer;
class Trainer;
struct TrainConfig;
struct TrainState;

// What a checkpoint is taken from: the parts of a training run.
struct TrainingParts {
  const TrainConfig& config;
  const TrainState& state;
  Model& model;
  Optimizer& optimizer;
  int64_t steps_per_epoch;
  int64_t train_rows;
  // The optimizer's buffers whole (Trainer::optimizer_state), in state() order; null: read from
  // the optimizer, whose buffers must then be whole (not sharded by --zero).
  const std::vector<std::vector<float>>* whole_state = nullptr;
  // The parameters to save (Trainer::params_to_save); null: the model's.
  const std::vector<float>* whole_params = nullptr;
};

// The run's state now (rank-local; parameters are the same on every rank).
CheckpointState capture_checkpoint(const TrainingParts& run, int world_size);
CheckpointState capture_checkpoint(Trainer& trainer, int world_size);

// Bytes of the tensors in a checkpoint of this run: the parameters and each optimizer buffer.
uint64_t checkpoint_bytes(const TrainingParts& run);
uint64_t checkpoint_bytes(Trainer& trainer);

// Collective, after a replica check: rank 0 writes a checkpoint of `run` into o.checkpoint_dir,
// keeping the newest o.keep_checkpoints; every rank waits for it until the checkpoint deadline
// (step_guard.h), then a TimeoutError names the file and --checkpoint-timeout. Returns the file.
std::string write_checkpoint(const TrainingParts& run, Communicator& comm, const GuardOptions& o);

// What this trainer's model and optimizer need of a checkpoint.
CheckpointExpectation expected_checkpoint(Trainer& trainer);

// Collective: rank 0 loads `path` (a file, or a folder's newest checkpoint) and checks it against
// the trainer; when it refuses, every rank throws the same UsageError. Otherwise rank 0 restores
// it and broadcasts the parameters, the optimizer state and the counters, which every rank
// restores (Trainer::restore): the other ranks never open the file. Returns the file used.
// `evaluate_only` (--eval-only): the model and optimizer must fit; the options that decide which
// samples each step sees (--seed, --global-batch, ...) need not be the run's.
std::string resume_from_checkpoint(Trainer& trainer, const std::string& path,
                                   bool evaluate_only = false);

}  // namespace lockstep
