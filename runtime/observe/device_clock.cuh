// DeviceClock: reads when a CUDA event completed, on a host clock, for the .cu files that time
// streams (device_timer.cu, gpu_trace.cu). A reference event recorded on a private idle stream and
// synchronised at once completes as it is recorded: its host time is the middle of that short
// window, and host(ev) = ref_host + cudaEventElapsedTime(ref, ev). Host and device clocks drift
// apart by parts per million, so callers take a new reference every kRecalibrateSeconds, and only
// while none of the events they will still read lies before the current one (elapsed times from
// a reference are meaningful for events after it). Calls return the CUDA error instead of throwing,
// so each caller chooses: the step's timer throws, the tracer stops quietly. Used by one thread.
#pragma once

#include <cuda_runtime_api.h>

namespace lockstep {

class DeviceClock {
 public:
  static constexpr double kRecalibrateSeconds = 5;

  DeviceClock() = default;
  ~DeviceClock() {
    if (ref_ != nullptr) (void)cudaEventDestroy(ref_);
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
  }
  DeviceClock(const DeviceClock&) = delete;
  DeviceClock& operator=(const DeviceClock&) = delete;

  // Takes a new reference, reading the host clock `now` (seconds) around it.
  cudaError_t calibrate(double (*now)()) {
    cudaError_t rc = cudaSuccess;
    if (stream_ == nullptr) rc = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking);
    if (rc == cudaSuccess && ref_ == nullptr) rc = cudaEventCreate(&ref_);
    if (rc != cudaSuccess) return rc;
    const double t0 = now();
    rc = cudaEventRecord(ref_, stream_);
    if (rc == cudaSuccess) rc = cudaEventSynchronize(ref_);
    if (rc != cudaSuccess) return rc;
    const double t1 = now();
    ref_host_ = 0.5 * (t0 + t1);
    calibrated_at_ = t1;
    calibrated_ = true;
    return cudaSuccess;
  }

  bool calibrated() const { return calibrated_; }
  // Whether a new reference is due at host time `now_seconds`.
  bool stale(double now_seconds) const {
    return !calibrated_ || now_seconds - calibrated_at_ > kRecalibrateSeconds;
  }

  // The host time at which completed event `ev` (recorded after the reference) completed.
  cudaError_t host_seconds(cudaEvent_t ev, double* seconds) const {
    float ms = 0;
    const cudaError_t rc = cudaEventElapsedTime(&ms, ref_, ev);
    if (rc == cudaSuccess) *seconds = ref_host_ + 1e-3 * static_cast<double>(ms);
    return rc;
  }

 private:
  cudaStream_t stream_ = nullptr;  // private and idle, so the reference completes as recorded
  cudaEvent_t ref_ = nullptr;
  double ref_host_ = 0;
  double calibrated_at_ = 0;
  bool calibrated_ = false;
};

}  // namespace lockstep
