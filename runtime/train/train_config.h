// TrainConfig: a run's settings, the runtime's API for them (DESIGN.md, "Options: one table").
// Its member initialisers are the options' defaults; the option table (config_table.h) reads and
// writes each member as text, and validate() applies every rule. Apart from the Trainer, the
// option table, the checks and the checkpoint code need only this header. Plain data (one thread
// uses a value at a time); validate() makes no collective calls.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/base/device_kind.h"
#include "runtime/base/precision.h"
#include "runtime/data/dataset.h"
#include "runtime/model/lr_schedule.h"
#include "runtime/model/model_spec.h"
#include "runtime/model/optimizer.h"
#include "runtime/train/step_guard.h"

namespace lockstep {

enum class LossKind { automatic, cross_entropy, mse };
LossKind parse_loss(
    const std::string& text);  // auto | cross-entropy | mse; UsageError naming --loss
const char* loss_name(LossKind k);

// The dtype of --zero's parameter all-gather on the wire (zero.h): automatic is the compute
// precision. With bf16 (half the bytes) every rank computes with the parameters rounded to bf16,
// and the fp32 master weights live in the ranks' shards, whence the checkpoints take them.
enum class GatherDtype { automatic, fp32, bf16 };
GatherDtype parse_gather_dtype(const std::string& text);  // UsageError naming --gather-dtype
const char* gather_dtype_name(GatherDtype d);

// A run's settings. These member initialisers are the options' defaults: lockstep-train --help
// shows them through the option table (config_table.h), which names each option's member.
struct TrainConfig;
// What --zero's all-gather sends: fp32 without ZeRO (nothing is gathered), else --gather-dtype,
// automatic taking --precision.
Precision gather_precision(const TrainConfig& c);

struct TrainConfig {
  DatasetSpec train;                // group "train" by default
  std::string test_group = "test";  // the same file's split that evaluate() scores
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
  int64_t steps = 0;   // > 0: stop after this many updates (overrides epochs)
  int grad_accum = 1;  // K micro-batches of B/K per update
  // ZeRO stage (DESIGN.md decision 19): 0 every rank holds the whole optimizer state; 1 each rank
  // the state of its 1/P of the parameters (gradients reduce-scattered, parameters all-gathered).
  int zero = 0;
  GatherDtype gather_dtype = GatherDtype::automatic;  // resolved by gather_precision()
  double bucket_mb = 25;  // gradient bucket size in MiB (0: one all-reduce after backward)
  // What the layers recompute in the backward pass instead of keeping it (model_spec.h: the GPT
  // blocks' GELU outputs, or their whole activations).
  Recompute recompute = Recompute::none;
  DeviceKind device = DeviceKind::cpu;            // where the layers compute
  Precision precision = Precision::fp32;          // compute dtype; bf16 needs device cuda
  Precision grad_reduce_dtype = Precision::fp32;  // dtype of the gradient all-reduce on the wire
  // cuda: capture each full training step of one micro-batch in a CUDA graph and replay it
  // (DESIGN.md decision 18), where the gradient communicator allows (Communicator::capturable).
  bool cuda_graphs = true;
  uint64_t seed = 0;
  bool shuffle = true;
  bool drop_remainder = false;
  double clip_norm = 0.0;         // > 0: clip the averaged gradient to this global L2 norm
  int64_t log_every = 50;         // steps between reduced loss/accuracy reports
  int64_t check_every = 100;      // steps between replica checks (0: only at start and end)
  int64_t straggler_every = 100;  // steps between straggler reports (straggler.h; 0: none)
  bool eval_every_epoch = true;
  // Evaluate on the test split once more when training ends (lockstep-bench does not: its
  // profiles of a step would count that evaluation's forward passes).
  bool eval_at_end = true;
  // Also evaluate every eval_every updates (0: at epoch ends only), where no epoch ends.
  int64_t eval_every = 0;
  // Every evaluation reads the first eval_steps batches of the test split, in file order (0: all
  // of it); a batch is the rows of one micro-batch over all ranks.
  int64_t eval_steps = 0;
  int prefetch = 2;
  // Each split of at most this many MiB as stored is read whole into memory once (every rank
  // holds it); 0: each batch reads its rows from the file (ShardedLoader).
  int64_t data_in_memory_mb = kDefaultInMemoryBytes >> 20;
  std::string metrics_path;     // JSON lines, written by rank 0; empty: none
  bool append_metrics = false;  // add to metrics_path's lines (a resumed run) instead of replacing
  // A GPT on token data: every sample_every steps (0: never), rank 0 prints sample_bytes tokens
  // sampled after sample_prompt (sample_text.h: temperature 1, seeded by seed + the step).
  int64_t sample_every = 0;
  int sample_bytes = 128;
  std::string sample_prompt = "\n";
  bool print = true;          // rank 0 prints progress and epoch lines
  int host_ranks = 1;         // ranks sharing this host's memory (World::local_size; the program)
  bool progress_bar = false;  // a redrawn bar (a terminal) instead of plain lines
  GuardOptions guard;         // checkpoints, stop signals, NaN policy (step_guard.h)
};

// Checks the values a user sets, each in words naming its option, for a world of `world_size`
// ranks (throws UsageError): every option's rule from its row (config_table.h), then the rules
// across options.
void validate(const TrainConfig& c, int world_size);

}  // namespace lockstep
