#include "runtime/observe/straggler.h"

#include <algorithm>
#include <cstdio>

#include "runtime/base/communicator.h"

namespace lockstep {

StragglerReport StragglerWatch::measure(Communicator& comm, const StepTimes& times,
                                        int64_t global_step) {
  const StepTimes w = times.minus(since_);
  since_ = times;
  const double steps = w.steps > 0 ? static_cast<double>(w.steps) : 1.0;
  double mine[2] = {w.total / steps, (w.total - w.comm) / steps};
  const size_t P = static_cast<size_t>(comm.size());
  std::vector<double> all(2 * P);
  comm.all_gather(mine, all.data(), 2, DType::f64);
  StragglerReport r;
  r.step = global_step;
  r.window_steps = w.steps;
  for (size_t i = 0; i < P; ++i) {
    r.mean_step_s.push_back(all[2 * i]);
    r.mean_compute_s.push_back(all[2 * i + 1]);
  }
  auto slowest = std::max_element(r.mean_compute_s.begin(), r.mean_compute_s.end());
  r.slowest_rank = static_cast<int>(slowest - r.mean_compute_s.begin());
  r.slowest_compute_s = *slowest;
  r.fastest_compute_s = *std::min_element(r.mean_compute_s.begin(), r.mean_compute_s.end());
  std::vector<double> sorted = r.mean_compute_s;
  std::sort(sorted.begin(), sorted.end());
  r.median_compute_s = P % 2 ? sorted[P / 2] : 0.5 * (sorted[P / 2 - 1] + sorted[P / 2]);
  r.spread = r.fastest_compute_s > 0 ? r.slowest_compute_s / r.fastest_compute_s - 1 : 0;
  return r;
}

std::string StragglerReport::text() const {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "straggler step=%lld window=%lld slowest_rank=%d compute_ms=%.2f median_ms=%.2f "
                "fastest_ms=%.2f spread=%.1f%%",
                static_cast<long long>(step), static_cast<long long>(window_steps), slowest_rank,
                slowest_compute_s * 1e3, median_compute_s * 1e3, fastest_compute_s * 1e3,
                spread * 100);
  return buf;
}

std::string StragglerReport::json() const {
  auto list = [](const std::vector<double>& v) {
    std::string s = "[";
    char num[32];
    for (size_t i = 0; i < v.size(); ++i) {
      std::snprintf(num, sizeof num, "%s%.6f", i ? ", " : "", v[i]);
      s += num;
    }
    return s + "]";
  };
  char head[256];
  std::snprintf(head, sizeof head,
                "{\"kind\": \"straggler\", \"step\": %lld, \"window_steps\": %lld, "
                "\"slowest_rank\": %d, \"spread\": %.6f, \"median_compute_s\": %.6f, ",
                static_cast<long long>(step), static_cast<long long>(window_steps), slowest_rank,
                spread, median_compute_s);
  return std::string(head) + "\"step_s\": " + list(mean_step_s) +
         ", \"compute_s\": " + list(mean_compute_s) + "}";
}

}  // namespace lockstep
