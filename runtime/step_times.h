// Where a training step's time goes, per rank: waiting for data, forward (with the loss),
// backward, communication (the gradient all-reduce), optimizer update. The trainer adds each
// phase as it ends; lockstep-bench and the trace writer read the totals, or subscribe to every
// phase through a PhaseHook. Plain data; no locking.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>

namespace lockstep {

enum class Phase { data, forward, backward, comm, optimizer };
const char* phase_name(Phase p);  // "data", "forward", ...

struct StepTimes {
  double data = 0, forward = 0, backward = 0, comm = 0, optimizer = 0;  // seconds
  double total = 0;     // wall time of the steps: the phases plus what lies between them
  int64_t steps = 0;    // updates
  int64_t samples = 0;  // valid samples of the global batches (all ranks)

  double& operator[](Phase p);
  void add(const StepTimes& o);
  StepTimes minus(const StepTimes& earlier) const;  // the interval between two snapshots
};

// Called at the end of each phase with its start and end, in seconds on the steady clock since
// the trainer was built. Runs on the training thread: keep it cheap.
using PhaseHook = std::function<void(Phase phase, double begin, double end)>;

// Seconds on the steady clock since construction.
class Stopwatch {
 public:
  Stopwatch() : start_(std::chrono::steady_clock::now()) {}
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  std::chrono::steady_clock::time_point start_;
};

}  // namespace lockstep
