// DeviceTimer: points of one CUDA stream's work, timed by the device and read as steady_seconds()
// (step_times.h) without waiting for the stream: the trainer's device phases (step_timer.h).
//
// record() enqueues a timing event (from a pool) at this point of the stream and returns its id;
// once the work before it has run (done(), or after any synchronisation that covers the stream),
// seconds() reads when that was. Device times become host times through a reference event whose
// host time was read as it completed (host(ev) = t_ref + cudaEventElapsedTime(ref, ev)); the
// reference is taken on an idle private stream, at the first record() and again every few seconds
// at a record() while no event is outstanding, so every outstanding event lies after the
// reference in use and the two clocks cannot drift apart. Taking one waits only for that idle
// stream, never for the timed one.
//
// Errors are CUDA errors of the step (std::runtime_error from LS_CHECK_CUDA). Used by one thread,
// on the stream's device; the stream must outlive this object. The CPU build links
// device_timer_stub.cpp, whose constructor throws (there is no stream to time).
// No collective calls.
#pragma once

#include <memory>

#include "kernels/cuda/stream.h"

namespace lockstep {

class DeviceTimer {
 public:
  explicit DeviceTimer(cudaStream_t stream);
  ~DeviceTimer();
  DeviceTimer(const DeviceTimer&) = delete;
  DeviceTimer& operator=(const DeviceTimer&) = delete;

  // A timing event at this point of the stream; the id stays outstanding until seconds() or
  // drop() gives it back.
  int record();
  // Moves event `id` (outstanding) to this point of the stream: the later point counts.
  void record_again(int id);
  // Whether the stream's work up to event `id` has run (cudaEventQuery: no waiting).
  bool done(int id);
  // Waits until it has (cudaEventSynchronize).
  void wait(int id);
  // When the work up to event `id` had run, in steady_seconds(); the event must be done. Gives the
  // id back.
  double seconds(int id);
  // Gives the id back unread (a step abandoned by an exception).
  void drop(int id);

  // CUDA graphs (DESIGN.md decision 18). record() on a stream that is being captured records the
  // event as an external node of the graph (cudaEventRecordExternal), so that each replay records
  // it again, and pins its id: seconds() and drop() then leave it reserved for the graph rather
  // than giving it back. Before a replay, rearm() counts a pinned id outstanding again (the replay
  // will record it), after calibrate_if_stale(): the clock may recalibrate only with nothing
  // outstanding. unpin() gives a pinned id back for good (its graph is gone).
  void rearm(int id);
  void calibrate_if_stale();
  void unpin(int id);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace lockstep
