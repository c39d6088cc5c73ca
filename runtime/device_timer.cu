// DeviceTimer (device_timer.h) for the CUDA build; device_timer_stub.cpp stands in without CUDA.
#include "runtime/device_timer.h"

#include <cuda_runtime_api.h>

#include <string>
#include <vector>

#include "kernels/cuda_check.h"
#include "runtime/error.h"
#include "runtime/step_times.h"

namespace lockstep {

namespace {

// Host and device clocks drift apart by parts per million: a fresh reference every few seconds
// keeps that, and the float milliseconds of cudaEventElapsedTime, well under a microsecond.
constexpr double kRecalibrateSeconds = 5;

}  // namespace

struct DeviceTimer::State {
  cudaStream_t stream = nullptr;
  std::vector<cudaEvent_t> events;  // by id
  std::vector<int> free_ids;
  int outstanding = 0;
  cudaStream_t ref_stream = nullptr;  // private and idle, so `ref` completes as it is recorded
  cudaEvent_t ref = nullptr;
  double ref_host = 0;       // steady_seconds() at which `ref` completed
  bool calibrated = false;

  cudaEvent_t& event(int id) {
    if (id < 0 || static_cast<size_t>(id) >= events.size())
      throw Error("DeviceTimer: no event " + std::to_string(id));
    return events[static_cast<size_t>(id)];
  }

  void calibrate() {
    if (ref_stream == nullptr)
      LS_CHECK_CUDA(cudaStreamCreateWithFlags(&ref_stream, cudaStreamNonBlocking));
    if (ref == nullptr) LS_CHECK_CUDA(cudaEventCreate(&ref));
    const double t0 = steady_seconds();
    LS_CHECK_CUDA(cudaEventRecord(ref, ref_stream));
    LS_CHECK_CUDA(cudaEventSynchronize(ref));
    const double t1 = steady_seconds();
    ref_host = 0.5 * (t0 + t1);
    calibrated = true;
  }

  void give_back(int id) {
    free_ids.push_back(id);
    --outstanding;
  }
};

DeviceTimer::DeviceTimer(cudaStream_t stream) : state_(std::make_unique<State>()) {
  state_->stream = stream;
}

DeviceTimer::~DeviceTimer() {
  // Destroying an event whose work is still queued is allowed: CUDA frees it once it completes.
  for (cudaEvent_t e : state_->events) (void)cudaEventDestroy(e);
  if (state_->ref != nullptr) (void)cudaEventDestroy(state_->ref);
  if (state_->ref_stream != nullptr) (void)cudaStreamDestroy(state_->ref_stream);
}

int DeviceTimer::record() {
  State& st = *state_;
  // Recalibrate only with nothing outstanding: every event read later lies after its reference.
  if (st.outstanding == 0 &&
      (!st.calibrated || steady_seconds() - st.ref_host > kRecalibrateSeconds))
    st.calibrate();
  int id;
  if (!st.free_ids.empty()) {
    id = st.free_ids.back();
    st.free_ids.pop_back();
  } else {
    cudaEvent_t e = nullptr;
    LS_CHECK_CUDA(cudaEventCreate(&e));
    st.events.push_back(e);
    id = static_cast<int>(st.events.size() - 1);
  }
  ++st.outstanding;
  try {
    LS_CHECK_CUDA(cudaEventRecord(st.event(id), st.stream));
  } catch (...) {
    st.give_back(id);
    throw;
  }
  return id;
}

void DeviceTimer::record_again(int id) {
  LS_CHECK_CUDA(cudaEventRecord(state_->event(id), state_->stream));
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
  float ms = 0;
  const cudaError_t rc = cudaEventElapsedTime(&ms, st.ref, st.event(id));
  st.give_back(id);
  LS_CHECK_CUDA(rc);
  return st.ref_host + 1e-3 * static_cast<double>(ms);
}

void DeviceTimer::drop(int id) {
  state_->event(id);
  state_->give_back(id);
}

}  // namespace lockstep
