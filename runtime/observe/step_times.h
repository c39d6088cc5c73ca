// Where a training step's time goes, per rank: waiting for data, forward (with the loss),
// backward, communication (the gradient all-reduce), optimizer update. The trainer adds each
// phase as it ends; lockstep-bench and the trace writer read the totals, or subscribe to every
// phase through a PhaseHook. Plain data; no locking.
//
// On the CPU every phase is host time between the trainer's marks. On a CUDA device the host only
// enqueues work, so the phases are the device's (step_timer.h), timed by events on the compute
// stream. forward: from the stream reaching the micro-batch's first layer (its batch copied) to
// the end of the loss kernel. backward: from there to the end of the last backward kernel. comm:
// from there until the stream may go on after the gradient all-reduce, i.e. only the reduction
// time that did not overlap the backward pass (staged through host memory: from the last bucket's
// copy down to the copies back up). optimizer: from there to the end of the update: the gradient
// norm, the step's one read-back, the host's decision (NaN guard, agreed over the host
// communicator), clipping and the update. data stays host time: the wait for the loader and the
// staging of the batch into page-locked memory, except for a step's first micro-batch, which the
// trainer takes and stages during the step before, while the device works (not counted; on the
// CPU that wait counts as data too). Device phases reach StepTimes and the hook up to a
// step late (once their events have completed; all by the end of Trainer::run), each step's in
// order; total, steps and samples are counted as each step ends. The host's data wait may overlap
// the device's update of the step before, so on a GPU the phases may add up to a little more than
// total.
// Plain data and pure functions: one thread uses a value at a time. No collective calls.
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

// Called once per phase of each step, in the step's order, with the phase's start and end in
// steady_seconds(). Runs on the training thread: keep it cheap.
using PhaseHook = std::function<void(Phase phase, double begin, double end)>;

// Seconds on std::chrono::steady_clock since its epoch: the time base of PhaseHook.
double steady_seconds();

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
