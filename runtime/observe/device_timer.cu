// DeviceTimer (device_timer.h) for the CUDA build; device_timer_stub.cpp stands in without CUDA.
#include <cuda_runtime_api.h>

#include <string>
#include <vector>

#include "kernels/cuda/check.h"
#include "runtime/base/error.h"
#include "runtime/observe/device_clock.cuh"
#include "runtime/observe/device_timer.h"
#include "runtime/observe/step_times.h"

namespace lockstep {

struct DeviceTimer::State {
  cudaStream_t stream = nullptr;
  std::vector<cudaEvent_t> events;  // by id
  std::vector<int> free_ids;
  std::vector<bool> pinned;  // by id: recorded inside a CUDA graph, reserved for it
  int outstanding = 0;
  DeviceClock clock;  // on steady_seconds()

  cudaEvent_t& event(int id) {
    if (id < 0 || static_cast<size_t>(id) >= events.size())
      throw Error("DeviceTimer: no event " + std::to_string(id));
    return events[static_cast<size_t>(id)];
  }

  void give_back(int id) {
    if (!pinned[static_cast<size_t>(id)]) free_ids.push_back(id);
    --outstanding;
  }
};

DeviceTimer::DeviceTimer(cudaStream_t stream) : state_(std::make_unique<State>()) {
  state_->stream = stream;
}

DeviceTimer::~DeviceTimer() {
  // Destroying an event whose work is still queued is allowed: CUDA frees it once it completes.
  for (cudaEvent_t e : state_->events) (void)cudaEventDestroy(e);
}

void DeviceTimer::calibrate_if_stale() {
  State& st = *state_;
  // Recalibrate only with nothing outstanding: every event read later lies after its reference.
  if (st.outstanding == 0 && st.clock.stale(steady_seconds()))
    LS_CHECK_CUDA(st.clock.calibrate(&steady_seconds));
}

int DeviceTimer::record() {
  State& st = *state_;
  calibrate_if_stale();
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  LS_CHECK_CUDA(cudaStreamIsCapturing(st.stream, &capture));
  const bool captured = capture == cudaStreamCaptureStatusActive;
  int id;
  if (!st.free_ids.empty()) {
    id = st.free_ids.back();
    st.free_ids.pop_back();
  } else {
    cudaEvent_t e = nullptr;
    LS_CHECK_CUDA(cudaEventCreate(&e));
    st.events.push_back(e);
    st.pinned.push_back(false);
    id = static_cast<int>(st.events.size() - 1);
  }
  ++st.outstanding;
  try {
    if (captured)
      LS_CHECK_CUDA(cudaEventRecordWithFlags(st.event(id), st.stream, cudaEventRecordExternal));
    else
      LS_CHECK_CUDA(cudaEventRecord(st.event(id), st.stream));
  } catch (...) {
    st.give_back(id);
    throw;
  }
  st.pinned[static_cast<size_t>(id)] = captured;
  return id;
}

void DeviceTimer::record_again(int id) {
  State& st = *state_;
  if (st.pinned[static_cast<size_t>(id)])
    LS_CHECK_CUDA(cudaEventRecordWithFlags(st.event(id), st.stream, cudaEventRecordExternal));
  else
    LS_CHECK_CUDA(cudaEventRecord(st.event(id), st.stream));
}

void DeviceTimer::rearm(int id) {
  state_->event(id);
  ++state_->outstanding;
}

void DeviceTimer::unpin(int id) {
  State& st = *state_;
  st.event(id);
  if (!st.pinned[static_cast<size_t>(id)]) return;
  st.pinned[static_cast<size_t>(id)] = false;
  st.free_ids.push_back(id);
}

bool DeviceTimer::done(int id) {
  const cudaError_t rc = cudaEventQuery(state_->event(id));
  if (rc == cudaErrorNotReady) return false;
  LS_CHECK_CUDA(rc);
  return true;
}

void DeviceTimer::wait(int id) { LS_CHECK_CUDA(cudaEventSynchronize(state_->event(id))); }

double DeviceTimer::seconds(int id) {
  State& st = *state_;
  double seconds = 0;
  const cudaError_t rc = st.clock.host_seconds(st.event(id), &seconds);
  st.give_back(id);
  LS_CHECK_CUDA(rc);
  return seconds;
}

void DeviceTimer::drop(int id) {
  state_->event(id);
  state_->give_back(id);
}

}  // namespace lockstep
