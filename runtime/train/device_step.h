// DeviceStep: the Step (step.h) of a model that computes on a CUDA device, the twin of HostStep
// (host_step.h); the Trainer owns one when TrainConfig::device is cuda.
//
// It owns the compute stream the model, optimizer and gradient buckets queue their work on, and a
// copy stream. upload() brings a batch up through page-locked host memory on the copy stream and
// makes the compute stream wait for it with an event, without blocking the host; two slots
// alternate, so a batch's copy overlaps the compute still queued for the one before. stage()
// starts a batch's copy ahead of its upload(): the Trainer stages the next step's batch while
// this step's work still runs on the device, before finish() waits, so neither the host's copy
// into pinned memory nor the transfer stands between two steps. A staged slot is kept for its
// batch: other uploads (evaluation) take the other slot meanwhile. loss() adds the batch's loss
// totals into a LossTotals kept in device memory (kernels' *_sums_cuda forms);
// finish() reads them back, together with the gradient's global L2 norm when asked (computed on
// the device: a non-finite norm is a non-finite gradient), in one synchronous copy, and starts new
// totals. clip() scales the gradient by that same device-side norm. The totals are known only at
// finish(), so totals_before_reduce() is null: the guard's flags leave after the read-back.
//
// Timing: a DeviceTimer on the compute stream times the trainer's phases (step_timer.h), and
// under --trace GpuTraces record the device-timed spans of each stream: "GPU stream: compute"
// (the model's layers through ModelPlacement::trace, the loss, the gradient norm, clipping, the
// update) and "GPU stream: copy" (each batch's copy, with its bytes). Off --trace a span costs one
// atomic load.
//
// CUDA graphs (graphs(), step.h: StepGraphs; DESIGN.md decision 18): a full training step is
// captured on the compute stream once per input slot, with the read-back of the totals and the
// norm into page-locked memory as its last node, and replayed with one launch; loss() inside a
// capture leaves the sample count to each launch.
//
// Used by the training thread only; the host blocks only in finish() and in upload() when a slot's
// previous copy is still running.
// No collective calls: the Trainer runs the gradient reduction between loss() and finish().
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "kernels/cuda/stream.h"
#include "runtime/base/communicator.h"
#include "runtime/base/device_kind.h"
#include "runtime/data/sharded_loader.h"
#include "runtime/train/step.h"

namespace lockstep {

class DeviceTimer;
class GpuTrace;

// Throws UsageError, in words, when this build has no CUDA layers or no CUDA device answers.
void require_cuda_training();

class DeviceStep final : public Step {
 public:
  // Needs a current CUDA device.
  explicit DeviceStep(const StepShape& shape);
  ~DeviceStep() override;
  DeviceStep(const DeviceStep&) = delete;
  DeviceStep& operator=(const DeviceStep&) = delete;

  // The compute stream, and its recorder of spans.
  ModelPlacement placement(Precision precision) override;
  DeviceTimer* timer() override;  // on the compute stream
  GpuTrace* trace() override;     // spans of the compute stream

  // Queues the copy of b's inputs, labels or targets and mask; returns the device inputs
  // [b.rows, input_size], readable by work queued on the compute stream from now on.
  const float* upload(const Batch& b) override;
  void stage(const Batch& b) override;
  // `out` is in device memory; the totals add up in device memory.
  void loss(const Batch& b, const float* out, float scale, float* dout) override;
  void loss_bf16(const Batch& b, const uint16_t* out, float scale, uint16_t* dout) override;
  // The last uploaded batch's slot may be overwritten by the upload after next, once the work
  // queued so far has run.
  void release() override;
  const LossTotals* totals_before_reduce() const override { return nullptr; }
  // Waits for the stream, reads the totals (and the norm of grads[0, n) when grads is not null)
  // and zeroes them.
  Outcome finish(const float* grads, size_t n) override;
  // By the norm of the last finish(), on the device.
  void clip(float* grads, size_t n, double max_norm) override;
  // Captured training steps (step.h: StepGraphs): a graph per input slot.
  StepGraphs* graphs() override;
  // Queued on the compute stream: +Inf into the device totals' loss, which the loss adds to.
  void poison_loss() override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lockstep
