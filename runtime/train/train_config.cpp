#include "runtime/train/train_config.h"

// TrainConfig's parsing helpers and its check.
#include <cmath>
#include <string>

#include "runtime/base/error.h"
#include "runtime/comm/buckets.h"
#include "runtime/data/sharded_loader.h"
#include "runtime/model/model_spec.h"
#include "runtime/train/config_table.h"
#include "runtime/train/train_checks.h"

namespace lockstep {

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

GatherDtype parse_gather_dtype(const std::string& text) {
  if (text == "auto") return GatherDtype::automatic;
  if (text == "fp32") return GatherDtype::fp32;
  if (text == "bf16") return GatherDtype::bf16;
  throw UsageError("--gather-dtype must be auto, fp32 or bf16, not '" + text + "'");
}

const char* gather_dtype_name(GatherDtype d) {
  switch (d) {
    case GatherDtype::automatic: return "auto";
    case GatherDtype::fp32: return "fp32";
    case GatherDtype::bf16: return "bf16";
  }
  return "?";
}

Precision gather_precision(const TrainConfig& c) {
  if (c.zero == 0) return Precision::fp32;
  if (c.gather_dtype == GatherDtype::automatic) return c.precision;
  return c.gather_dtype == GatherDtype::bf16 ? Precision::bf16 : Precision::fp32;
}

void validate(const TrainConfig& c, int world_size) {
  check_config_options(c);  // each option's own rule (config_table.h); then those across options
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
  if (c.zero > 2) throw UsageError("--zero must be 0, 1 or 2, not " + std::to_string(c.zero));
  if (c.zero == 0 && c.gather_dtype == GatherDtype::bf16)
    throw UsageError(
        "--gather-dtype bf16 needs --zero 1 or 2 (without ZeRO no parameters are gathered)");
  if (c.steps == 0 && c.epochs < 1)
    throw UsageError("--epochs must be >= 1 (or set --steps), not " + std::to_string(c.epochs));
  if (c.precision == Precision::bf16 && c.device != DeviceKind::cuda)
    throw UsageError("--precision bf16 needs --device cuda (the CPU layers compute in fp32)");
  validate(c.optimizer);
  validate(c.guard);
}

}  // namespace lockstep
