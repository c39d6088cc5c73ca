// Learning-rate schedules, as pure functions of the update step (0-based: lr_at(c, 0) is the rate
// of the first update). Every rank computes the same value, so no communication is needed.
//
//   warm-up:  for step < warmup_steps, lr = peak * (step + 1) / warmup_steps (any schedule)
//   constant: lr = peak
//   cosine:   lr = min_lr + (peak - min_lr) * (1 + cos(pi * t)) / 2
//   linear:   lr = min_lr + (peak - min_lr) * (1 - t)
// where t = (step - warmup_steps) / (total_steps - warmup_steps), clamped to [0, 1].
//
// The linear scaling rule (Goyal et al., 2017) sets peak = lr * global_batch / base_batch, so a
// learning rate tuned at base_batch carries over to larger global batches.
// Pure functions: thread-safe, no collective calls.
#pragma once

#include <cstdint>
#include <string>

namespace lockstep {

enum class LrScheduleKind { constant, cosine, linear };
const char* lr_schedule_name(LrScheduleKind k);
LrScheduleKind parse_lr_schedule(const std::string& text);  // throws UsageError naming the option

struct LrSchedule {
  LrScheduleKind kind = LrScheduleKind::constant;
  double peak_lr = 1e-3;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;  // updates in the whole run (cosine and linear decay over them)
  double min_lr = 0.0;
};

double lr_at(const LrSchedule& s, int64_t step);

enum class LrScaling { none, linear };
LrScaling parse_lr_scaling(const std::string& text);  // throws UsageError naming the option

// The peak rate after the scaling rule: lr, or lr * global_batch / base_batch.
double scaled_lr(double lr, LrScaling scaling, int64_t global_batch, int64_t base_batch);

}  // namespace lockstep
