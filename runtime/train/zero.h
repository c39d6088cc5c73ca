// ZeroShard: the optimizer's share of one rank under --zero 1 (ZeRO stage 1, DESIGN.md decision
// 19).
//
// The gradient buckets are reduce-scattered instead of all-reduced (buckets.h, sharded): every
// bucket is cut into P equal blocks and block r holds, on rank r, the sum over the ranks. Rank r
// keeps the optimizer state of its blocks only - 1/P of it, owned() floats, its blocks in bucket
// order (segments(), for Optimizer::set_segments) - updates its blocks of the flat parameters in
// place from its blocks of the reduced gradient, and all-gathers every bucket in place, so that
// every rank holds all the parameters again before they are next read (wait()). Clipping and the
// NaN guard use the norm of the whole reduced gradient, from a sum of squares all-reduced once: the
// same decisions as unsharded, up to the summation order. The model pads its layout for this
// (ModelPlacement:: shard_ranks), so every bucket divides by P at any world size; nothing falls
// back silently.
//
// The all-gather's wire (--gather-dtype): fp32 gathers the parameters themselves. bf16 halves the
// bytes: rank r then keeps the fp32 master weights of its blocks (masters()), the optimizer
// updates those, and publish() casts them to bf16 into a flat bf16 buffer, gathers it and widens
// it into the parameters, so every rank computes with the same parameters, rounded to bf16 (as
// llm.c's -z 1 does). adopt() takes the masters from whole parameters (the initial ones, a
// checkpoint's) and rounds the model's. Checkpoints save the masters (full()).
//
// Work on a device is queued on the model's stream. Checkpoints keep the unsharded format:
// full() assembles a whole state buffer on every rank, take() keeps this rank's blocks of one.
// Used by the training thread; global_norm, publish, wait and full are collective, in the order
// the trainer calls them, on every rank.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/cuda/stream.h"
#include "runtime/base/buffer.h"
#include "runtime/base/communicator.h"
#include "runtime/base/precision.h"
#include "runtime/comm/buckets.h"
#include "runtime/model/model.h"
#include "runtime/model/optimizer.h"

namespace lockstep {

class ZeroShard {
 public:
  // grads: the gradient communicator (the all-gathers, in the model's memory); host: host values
  // (the norm, checkpoints); reducer: its sharded buckets decide the blocks; wire: the
  // all-gather's dtype.
  ZeroShard(Communicator& grads, Communicator& host, const BucketReducer& reducer,
            DeviceKind device, cudaStream_t stream, Precision wire = Precision::fp32);

  size_t owned() const { return owned_; }
  // This rank's blocks: where each lies in the flat buffers and in the compact state.
  const std::vector<Optimizer::Segment>& segments() const { return segments_; }
  // Flat (offset, count) ranges, such as the decay ranges, as ranges of the compact state.
  ParamRanges to_compact(const ParamRanges& flat) const;

  // A bf16 wire: the fp32 master weights of this rank's blocks, laid out as the state; what the
  // optimizer updates (Optimizer::set_segments' compact_params).
  bool rounds() const { return !masters_.empty(); }
  Buffer<float>& masters() { return masters_; }
  // What the optimizer's step updates: the masters under a bf16 wire, else `params`.
  float* update_target(float* params) { return rounds() ? masters_.data() : params; }
  // A bf16 wire: this rank's masters from the model's whole parameters (every rank holds the
  // same), and the model's parameters rounded to bf16 as a gather leaves them. Nothing otherwise.
  void adopt(Model& model);

  // Whether the reduced gradients given to global_norm and clip (and the optimizer's step) are
  // compact, in the state's layout (stage 2: the reducer's sharded_grads()), or the flat buffer.
  bool compact_grads() const { return compact_; }
  // Collective over host: the L2 norm of the whole reduced gradient, from this rank's blocks of
  // `grads` (each rank's sum of squares, all-reduced).
  double global_norm(const float* grads);
  // Clipping as unsharded: this rank's blocks of `grads` scaled by max_norm / norm when the norm
  // exceeds max_norm.
  void clip(float* grads, double norm, double max_norm);
  // Collective over grads: every bucket's all-gather of `params` started, in place (each rank's
  // updated blocks to every rank); under a bf16 wire, of the bf16 copy of the masters.
  void publish(float* params);
  // Waits for the all-gathers publish() started (a bf16 wire: then widens them into the
  // parameters); nothing when none is pending.
  void wait();

  // The same step inside a captured one (a CUDA graph being recorded on the model's stream,
  // DESIGN.md decision 18; stage 1: the reducer's sharded buckets are capturable), all on the
  // device with no host wait. record_norm: the whole reduced gradient's norm into `norm` (device
  // memory: the graph's gate), from this rank's blocks' norms summed as global_norm sums them,
  // all-reduced over grads in the capture; collective. clip_on_device: clip() by that norm.
  // join: the all-gathers publish() started joined into the stream (nothing left pending: a
  // replay completes them before its end).
  void record_norm(const float* grads, double* norm);
  void clip_on_device(float* grads, const double* norm, double max_norm);
  void join();

  // Collective over host: the whole (flat-length) buffer whose blocks the ranks' `compact` hold,
  // on every rank.
  std::vector<float> full(const Buffer<float>& compact, size_t flat_count);
  // This rank's blocks of a whole buffer into `compact`.
  void take(const std::vector<float>& full, Buffer<float>& compact) const;

 private:
  Communicator& grads_comm_;
  Communicator& host_;
  std::vector<Bucket> buckets_;
  std::vector<Optimizer::Segment> segments_;  // one per bucket, in bucket order
  DeviceKind device_;
  cudaStream_t stream_;
  size_t owned_ = 0;
  bool compact_ = false;
  size_t at(const Optimizer::Segment& s) const { return compact_ ? s.state : s.flat; }
  Buffer<double> norms_;  // a device's per-block norms (global_norm)
  std::vector<WorkHandle> pending_;
  // A bf16 wire: the masters, the flat bf16 buffer the buckets are gathered in, and the
  // parameters a publish() has still to widen into (null: none).
  Buffer<float> masters_;
  Buffer<uint16_t> wire_;
  float* unwidened_ = nullptr;
  void widen();
};

}  // namespace lockstep
