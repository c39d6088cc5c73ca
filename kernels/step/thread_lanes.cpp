#include "kernels/step/thread_lanes.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace lockstep::kernels {

int lane_threads() {
#if defined(_OPENMP)
  return omp_in_parallel() ? 1 : omp_get_max_threads();
#else
  return 1;
#endif
}

namespace {

// The first exception of a run, kept; every call after it is skipped.
class FirstError {
 public:
  template <class Fn>
  void call(Fn&& fn) {
    if (failed_.load(std::memory_order_acquire)) return;
    try {
      fn();
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!error_) error_ = std::current_exception();
      failed_.store(true, std::memory_order_release);
    }
  }
  void rethrow() {
    if (error_) std::rethrow_exception(error_);
  }

 private:
  std::atomic<bool> failed_{false};
  std::mutex mutex_;
  std::exception_ptr error_;
};

}  // namespace

void run_lanes(int lanes, int rounds, const std::function<void(int lane, int round)>& work,
               const std::function<void(int round, int part, int parts)>& shared,
               const std::function<void(int round)>& serial) {
  if (lanes <= 0 || rounds <= 0) return;
  FirstError errors;
  const int threads = std::min(lanes, lane_threads());
  if (threads <= 1) {
    for (int r = 0; r < rounds; ++r) {
      for (int l = 0; l < lanes; ++l) errors.call([&] { work(l, r); });
      if (shared) errors.call([&] { shared(r, 0, 1); });
      if (serial) errors.call([&] { serial(r); });
    }
    errors.rethrow();
    return;
  }
#if defined(_OPENMP)
#pragma omp parallel num_threads(threads)
  {
    const int team = omp_get_num_threads(), me = omp_get_thread_num();
    // A lane's work plans for one thread: oneDNN's primitives created in it, and the kernels' own
    // loops, which see a parallel region anyway (kernels/onednn/util.h: planning_threads). Each
    // thread's implicit task has its own count: the caller's outside the region is untouched.
    omp_set_num_threads(1);
    for (int r = 0; r < rounds; ++r) {
      for (int l = me; l < lanes; l += team) errors.call([&] { work(l, r); });
      if (shared || serial) {
#pragma omp barrier
      }
      if (shared) {
        errors.call([&] { shared(r, me, team); });
#pragma omp barrier
      }
      if (serial && me == 0) errors.call([&] { serial(r); });
    }
  }
#endif
  errors.rethrow();
}

}  // namespace lockstep::kernels
