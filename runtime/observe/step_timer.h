// StepTimer: the trainer's marks between the phases of a step, turned into StepTimes and PhaseHook
// calls (step_times.h says what each phase means on either device).
//
// On the CPU (no DeviceTimer) each mark ends, on the host clock, the phase the mark before began,
// which is added and passed to the hook at once. On a CUDA device (a DeviceTimer on the compute
// stream) the data phase stays host time and the other marks record events on the stream; a
// step's phases are added and passed on, in order, once its events have completed. collect()
// finds those without waiting: cheaply (one cudaEventQuery) at a step's start, and for certain
// right after the step's read-back, which has waited for the stream anyway; flush() waits for the
// rest (the end of a run). device_step_phases() is the pure part: marks to phases.
//
// Used by the training thread only.
// No collective calls.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <vector>

#include "runtime/observe/step_times.h"

namespace lockstep {

class DeviceTimer;

// One phase of a step, [begin, end] in steady_seconds().
struct PhaseSpan {
  Phase phase;
  double begin = 0, end = 0;
};

// The marks of one step on a device, in steady_seconds(): per micro-batch the host's data wait
// and the device's forward begin, forward end (after the loss) and backward end; then the device
// times at which the stream could go on after the gradient reduction and at which the update had
// run.
struct DeviceStepMarks {
  struct Micro {
    double data_begin = 0, data_end = 0;
    double forward_begin = 0, forward_end = 0, backward_end = 0;
  };
  std::vector<Micro> micro;
  double reduced = 0, updated = 0;
};

// The step's phases in order: per micro-batch data, forward, backward; then comm from the last
// backward end to `reduced`, and optimizer from there to `updated`. The device marks are made
// non-decreasing in stream order (two readings may straddle a clock recalibration by a
// microsecond), and a device phase never begins before the host data it follows was ready.
std::vector<PhaseSpan> device_step_phases(const DeviceStepMarks& marks);

// Adds each span's length to `times` and passes it to `hook` (when set), in order.
void deliver_phases(const std::vector<PhaseSpan>& spans, StepTimes& times, const PhaseHook& hook);

class StepTimer {
 public:
  // `times`, `hook` (may be empty, and set later) and `device` (null: the CPU) outlive the timer.
  StepTimer(StepTimes& times, const PhaseHook& hook, DeviceTimer* device);
  ~StepTimer();
  StepTimer(const StepTimer&) = delete;
  StepTimer& operator=(const StepTimer&) = delete;

  bool on_device() const { return device_ != nullptr; }

  // A step begins (a step left unfinished by an exception is dropped); on a device, also
  // collects the earlier steps already complete. Returns the host time, in steady_seconds().
  double start_step();
  void data_ready();     // the loader gave a micro-batch (on a device: staged for its copy)
  void forward_begin();  // device: the first layer is next on the stream (CPU: forward began at
                         // data_ready)
  void forward_end();    // the loss is queued
  // Device only: the backward pass so far is queued; the last call before backward_end() counts
  // (the trainer calls it before each gradient reduction it starts, so staging copies fall in
  // comm). A no-op on the CPU.
  void backward_progress();
  void backward_end();  // the micro-batch's backward pass is queued
  // The next step's first micro-batch was taken from the loader after reduced() (and staged on a
  // device): on the CPU the time since counts as data; on a device it overlaps the queued work and
  // counts nowhere.
  void ahead_taken();
  void reduced();    // the gradient reduction is done (or, on a device, queued to be)
  double updated();  // the update is queued: the step's end; returns the host time
  // Device: adds and passes on the steps whose events have completed. `synced`: the host has just
  // waited for everything queued on the stream (the read-back), so every mark so far is done.
  void collect(bool synced);
  // Device: waits for the steps still pending and passes them on.
  void flush();

  // CUDA graphs (DESIGN.md decision 18). A step captured into a graph makes its device marks as
  // usual, from forward_begin() to updated(), between begin_capture(key) and end_capture(ok):
  // inside the capture they become the graph's own events (DeviceTimer pins them). A backward pass
  // is marked once, at backward_end(). end_capture(true) keeps them for the graph `key`;
  // end_capture(false) drops the step's marks (a capture that failed ran nothing) and reopens the
  // step for its uncaptured run. A replayed step calls replayed(key) after data_ready(), in place
  // of the marks from forward_begin() to updated(), before the graph is launched: the step's marks
  // are then the graph's events, which the caller must read (collect(true) once it has waited for
  // the step) before the graph is launched again. forget_captures() gives the events back (the
  // graphs are gone).
  void begin_capture(const void* key);
  void end_capture(bool ok);
  double replayed(const void* key);
  void forget_captures();

 private:
  struct Point {
    int id = -1;  // the DeviceTimer event, not yet read; -1: t holds the time
    double t = 0;
  };
  struct Micro {
    double data_begin = 0, data_end = 0;
    Point forward_begin, forward_end, backward_end;
    bool backward_marked = false;
  };
  struct Pending {
    std::vector<Micro> micro;
    Point reduced, updated;
  };

  void host_mark(Phase p);
  Point device_mark();
  void resolve(Point& p);
  void resolve(Pending& s);
  void drop(Pending& s);
  void deliver(const Pending& s);

  StepTimes& times_;
  DeviceTimer* device_;
  const PhaseHook& hook_;
  double t_ = 0;                     // host cursor: where the phase now running began
  bool open_ = false;                // a step has started and not reached updated()
  Pending current_;                  // device: the open step's marks
  std::deque<Pending> pending_;      // device: ended steps, oldest first, waiting for their events
  const void* capturing_ = nullptr;  // the graph being captured (begin_capture)
  std::map<const void*, Pending> captured_;  // each graph's marks: its events' ids
  void for_each_id(const Pending& s, const std::function<void(int)>& f) const;
};

}  // namespace lockstep
