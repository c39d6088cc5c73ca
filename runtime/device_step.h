// DeviceStep: the parts of a training or evaluation step that differ when the model computes on a
// CUDA device (the Trainer owns one when TrainConfig::device is cuda; on the CPU it has none).
//
// It owns the compute stream the model, optimizer and gradient buckets queue their work on, and a
// copy stream. upload() brings a batch up through page-locked host memory on the copy stream and
// makes the compute stream wait for it with an event, without blocking the host; two slots
// alternate, so a batch's copy overlaps the compute still queued for the one before. loss() adds
// the batch's loss totals into sums kept in device memory (kernels' *_sums_cuda forms); take()
// reads them back, together with the gradient's global L2 norm when asked (computed on the device:
// a non-finite norm is a non-finite gradient), in one synchronous copy, and starts new sums.
// clip() scales the gradient by that same device-side norm.
//
// Timing: a DeviceTimer on the compute stream times the trainer's phases (step_timer.h), and
// under --trace GpuTraces record the device-timed spans of each stream: "GPU stream: compute"
// (the model's layers through ModelPlacement::trace, the loss, the gradient norm, clipping, the
// update) and "GPU stream: copy" (each batch's copy, with its bytes). Off --trace a span costs one
// atomic load.
//
// Used by the training thread only; the host blocks only in take() and in upload() when a slot's
// previous copy is still running.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "kernels/cuda_stream.h"
#include "runtime/communicator.h"
#include "runtime/device_kind.h"
#include "runtime/sharded_loader.h"

namespace lockstep {

class DeviceTimer;
class GpuTrace;

// Throws UsageError, in words, when this build has no CUDA layers or no CUDA device answers.
void require_cuda_training();

class DeviceStep {
 public:
  // Batches of up to max_rows rows of input_size floats; `outputs` classes (classification: int32
  // labels) or target values (regression: float targets). Needs a current CUDA device.
  DeviceStep(size_t input_size, int outputs, int max_rows, bool classification);
  ~DeviceStep();
  DeviceStep(const DeviceStep&) = delete;
  DeviceStep& operator=(const DeviceStep&) = delete;

  cudaStream_t stream() const;
  DeviceTimer& timer();          // on stream()
  GpuTrace& compute_trace();     // spans of stream()

  // Queues the copy of b's inputs, labels or targets and mask; returns the device inputs
  // [b.rows, input_size], readable by work queued on stream() from now on.
  const float* upload(const Batch& b);
  // The loss of `out` [rows, outputs] (device) against the last uploaded batch, weighted by its
  // mask, added to the device sums; writes scale * dLoss/dout into dout unless it is null.
  void loss(const float* out, int rows, float scale, float* dout);
  // Call once the work that reads the last uploaded batch has been queued: its slot may then be
  // overwritten by the upload after next, once that work has run.
  void release();

  struct Totals {
    double loss_sum = 0;  // weighted loss sum of the batches since the last take()
    double correct = 0;   // weight of the correctly classified samples among them
    double grad_norm = 0; // L2 norm of the gradient given to take(), or 0
  };
  // Waits for the stream, reads the sums (and the norm of grads[0, n) when grads is not null) and
  // zeroes the sums. Throws Error when a label was outside [0, outputs).
  Totals take(const float* grads = nullptr, size_t n = 0);
  // Scales grads[0, n) to L2 norm max_norm when the norm of the last take() exceeds it.
  void clip(float* grads, size_t n, double max_norm);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lockstep
