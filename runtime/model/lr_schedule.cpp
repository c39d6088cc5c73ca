#include "runtime/model/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "runtime/base/error.h"

namespace lockstep {

const char* lr_schedule_name(LrScheduleKind k) {
  switch (k) {
    case LrScheduleKind::constant: return "constant";
    case LrScheduleKind::cosine: return "cosine";
    case LrScheduleKind::linear: return "linear";
  }
  return "?";
}

LrScheduleKind parse_lr_schedule(const std::string& text) {
  if (text == "constant") return LrScheduleKind::constant;
  if (text == "cosine") return LrScheduleKind::cosine;
  if (text == "linear") return LrScheduleKind::linear;
  throw UsageError("--lr-schedule must be constant, cosine or linear, not '" + text + "'");
}

double lr_at(const LrSchedule& s, int64_t step) {
  if (step < s.warmup_steps)
    return s.peak_lr * static_cast<double>(step + 1) / static_cast<double>(s.warmup_steps);
  if (s.kind == LrScheduleKind::constant) return s.peak_lr;
  int64_t span = s.total_steps - s.warmup_steps;
  double t =
      span <= 0 ? 1.0 : static_cast<double>(step - s.warmup_steps) / static_cast<double>(span);
  t = std::clamp(t, 0.0, 1.0);
  double frac =
      s.kind == LrScheduleKind::cosine ? 0.5 * (1.0 + std::cos(std::numbers::pi * t)) : 1.0 - t;
  return s.min_lr + (s.peak_lr - s.min_lr) * frac;
}

LrScaling parse_lr_scaling(const std::string& text) {
  if (text == "none") return LrScaling::none;
  if (text == "linear") return LrScaling::linear;
  throw UsageError("--lr-scaling must be none or linear, not '" + text + "'");
}

double scaled_lr(double lr, LrScaling scaling, int64_t global_batch, int64_t base_batch) {
  if (scaling == LrScaling::none || base_batch <= 0) return lr;
  return lr * static_cast<double>(global_batch) / static_cast<double>(base_batch);
}

}  // namespace lockstep
