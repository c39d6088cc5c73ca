// TrainConfig's parsing helpers and its check (declared in trainer.h).
#include <cmath>
#include <string>

#include "runtime/buckets.h"
#include "runtime/error.h"
#include "runtime/model_spec.h"
#include "runtime/sharded_loader.h"
#include "runtime/train_checks.h"
#include "runtime/trainer.h"

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

}  // namespace lockstep
