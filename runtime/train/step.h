// Step: the part of a training or evaluation step that depends on where the model computes,
// twinned as the kernels are: HostStep (host_step.h) for CPU layers, DeviceStep (device_step.h)
// for CUDA layers. The Trainer makes one at construction (make_step) and calls the same methods in
// the same order on either, so it has no device branches:
//
//   each micro-batch  x = upload(batch); model forward of x; loss(batch, out, scale, dout);
//                     model backward; release()
//   each step         guard flags with totals_before_reduce() when the step has them (the host:
//                     they travel with the gradient reduction), the reduction, finish(grads)
//                     (the totals, and whether the reduced gradient is finite), clip(grads)
//                     when asked, the update on placement()'s stream
//   evaluation        the micro-batch calls with scale 0 and no dout, then finish(nullptr, 0)
//
// A device step may also run whole steps from CUDA graphs (graphs(), StepGraphs below).
//
// Loss totals gather from the first loss() after a finish() up to the next finish(), in the
// order of the calls; samples counts each batch's valid rows (Batch::valid) times positions, so
// the mean loss and accuracy are per token for a token split.
// Used by the training thread only.
// No collective calls: the Trainer runs the gradient reduction between them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include "kernels/step/loss_totals.h"
#include "runtime/base/precision.h"
#include "runtime/data/sharded_loader.h"
#include "runtime/model/model.h"
#include "runtime/process/context.h"

namespace lockstep {

using kernels::LossTotals;

class DeviceTimer;
class GpuTrace;

// What a step's batches hold: rows of input_size floats, `outputs` classes (classification: int32
// labels) or target values (regression: float targets) at each of `positions` positions per row
// (a token split's T; the model's output is then [rows, positions, outputs] and the labels
// [rows, positions]), at most max_rows rows.
struct StepShape {
  size_t input_size = 0;
  int outputs = 0;
  int max_rows = 0;
  bool classification = true;
  int positions = 1;
};

class StepGraphs;

// How the step's work runs (Trainer): eagerly, each call enqueued or computed as it is made and the
// host deciding between them (whether to update), or recording, queued into a CUDA graph's capture
// that is replayed later, its decisions taken on the device (StepGraphs).
enum class StepMode { eager, recording };

class Step {
 public:
  struct Outcome {
    LossTotals totals;         // since the last finish()
    bool grads_finite = true;  // the gradient given to finish() holds no NaN or Inf
  };

  virtual ~Step() = default;

  // Where the model, its optimizer and the gradient buckets compute and queue their work.
  virtual ModelPlacement placement(Precision precision) = 0;
  virtual DeviceTimer* timer() = 0;  // the phases' device clock (step_timer.h); null: host clock
  virtual GpuTrace* trace() = 0;     // the compute stream's spans (gpu_trace.h); null: none

  // The inputs of `b` [b.rows, input_size] where the model reads them. A batch given to stage()
  // before (the same object or one it was swapped into: its x buffer) costs no second copy.
  virtual const float* upload(const Batch& b) = 0;
  // Starts bringing `b` to where the model reads it, ahead of its upload(), while the work queued
  // so far runs: the Trainer stages the next step's batch before it waits for this step's
  // read-back. Other uploads in between leave it alone; a second stage() drops the first.
  // Nothing to do on the host.
  virtual void stage(const Batch& b) { (void)b; }
  // Adds the loss of `out` [b.rows * positions, outputs] against `b` (the last batch uploaded),
  // each position weighted by its row's mask, to the totals; writes scale * dLoss/dout into dout
  // unless it is null.
  virtual void loss(const Batch& b, const float* out, float scale, float* dout) = 0;
  // The same with `out` and dout in bf16 words (Model::output_bf16: a bf16 run's tied head on the
  // GPU; classification only). Only a device step has it: std::logic_error elsewhere.
  virtual void loss_bf16(const Batch& b, const uint16_t* out, float scale, uint16_t* dout) {
    (void)b, (void)out, (void)scale, (void)dout;
    throw std::logic_error("Step::loss_bf16: bf16 outputs are a device step's");
  }
  // The work that reads the last uploaded batch is queued: its memory may be reused.
  virtual void release() = 0;
  // The totals so far, when they are known on the host before the gradient reduction; null when
  // they are known only at finish() (on a device, read back once per step).
  virtual const LossTotals* totals_before_reduce() const = 0;
  // The totals, and whether grads[0, n) is finite (null grads: nothing to check); starts new
  // totals. Throws Error when a label was outside [0, outputs).
  virtual Outcome finish(const float* grads, size_t n) = 0;
  // Scales grads[0, n) to L2 norm max_norm when its norm exceeds it (the gradient of the last
  // finish()).
  virtual void clip(float* grads, size_t n, double max_norm) = 0;
  // Whole training steps captured into CUDA graphs and replayed (DeviceStep); null: none.
  virtual StepGraphs* graphs() { return nullptr; }
  // Test hook (Trainer, LOCKSTEP_TEST_LOSS_INF): the loss of the step in progress, before its
  // loss is computed, becomes +Inf on this rank alone, its gradient untouched.
  virtual void poison_loss() = 0;
};

// CUDA graphs (DESIGN.md decision 18): a training step of one micro-batch, captured once into a
// graph on the compute stream (zeroed gradients, forward, loss, backward, gradient reduction,
// gradient norm, clipping, update, the read-back of the totals and the norm) and then replayed
// with one launch per step while the shapes stay the same. A graph is kept per `key` (the device
// input buffer the batch was uploaded to: the graph reads that buffer). The Trainer drives it:
//
//   capture   upload(b); begin(); the step's work, with gradient_norm() after the reduction and
//             the update gated on gate(); end(key); launch(key, b)
//   replay    upload(b); launch(key, b)
//   both      release(); wait for the stream (the gradient communicator's watch_stream); outcome()
//
// Between begin() and end() nothing runs: the work is recorded. Used by the training thread.
class StepGraphs {
 public:
  virtual ~StepGraphs() = default;
  // The compute stream starts being captured; loss() stops counting samples (launch() does).
  virtual void begin() = 0;
  // Inside the capture, after the loss: where `grads` has several ranks, the loss summed over
  // them (an all-reduce of one double, joined back by the gradients' join_stream) becomes the
  // gate's loss, so that a loss that is not finite on one rank leaves the update out on every
  // rank, as the host's agreed verdict does uncaptured; on one rank the local totals are the gate.
  virtual void share_loss(Communicator& grads) = 0;
  // Inside the capture: the L2 norm of grads[0, n) into the gate, as finish() computes it.
  virtual void gradient_norm(const float* grads, size_t n) = 0;
  // The device double gradient_norm writes (one of the gates): a step whose gradient is sharded
  // (ZeRO, zero.h: record_norm) writes its norm there itself.
  virtual double* norm_slot() = 0;
  // Device memory, gates() doubles: a step whose loss or gradient is not finite leaves the update
  // out (Optimizer::step_captured).
  virtual const double* gate() const = 0;
  virtual int gates() const = 0;
  // Once the host has waited for a launched graph: whether its update was applied (every gate
  // value finite).
  virtual bool applied() const = 0;
  // Ends the capture with the read-back of the gate into page-locked memory, instantiates the
  // graph and keeps it under `key`. Returns why that failed ("" when it did not): the capture is
  // then discarded and nothing of it ran.
  virtual std::string end(const void* key) = 0;
  // Ends a capture that threw, discarding it (nothing of it ran). Never throws.
  virtual void abort() noexcept = 0;
  virtual bool ready(const void* key) const = 0;
  // Launches the graph `key` on the compute stream for batch `b` (the last uploaded).
  virtual void launch(const void* key, const Batch& b) = 0;
  // The step's outcome, as finish() gives it, once the host has waited for the launched graph.
  virtual Step::Outcome outcome() = 0;
  // Destroys every graph (their memory is freed as the device finishes them).
  virtual void clear() noexcept = 0;
};

// The loss's weights of a batch whose rows hold `positions` predictions each: b.mask[r] repeated
// for each of row r's positions into weights[0, b.rows * positions). Throws Error naming `who`
// when the mask does not hold b.rows values or the result would pass `capacity`.
void weights_per_position(const Batch& b, size_t positions, float* weights, size_t capacity,
                          const char* who);

// The twin for `device`: a DeviceStep on cuda (needs a current CUDA device), else a HostStep.
std::unique_ptr<Step> make_step(DeviceKind device, const StepShape& shape);

}  // namespace lockstep
