// Gradient buckets (DESIGN.md decision 4): the flat gradient buffer cut into contiguous ranges,
// taken in reverse layer order, so that each range can be all-reduced as soon as the backward pass
// has finished the layers it covers, overlapping communication with the rest of the backward pass.
//
// assign_buckets() is a pure function of the layer sizes and the bucket size, so every rank
// computes the same buckets; BucketReducer issues one collective per bucket and all calls must
// happen in the same order on all ranks. A reducer is used by one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/cuda/stream.h"
#include "runtime/base/buffer.h"
#include "runtime/base/communicator.h"
#include "runtime/base/precision.h"

namespace lockstep {

// A range [offset, offset + count) of the flat gradient buffer covering the layers
// [first_layer, last_layer] (indices into the sizes given to assign_buckets).
struct Bucket {
  size_t offset = 0;
  size_t count = 0;
  int first_layer = 0;
  int last_layer = 0;
};

// `layer_sizes[i]`: elements of layer i's gradients, layers laid out in forward order from offset
// 0. Returns buckets in reverse layer order (the last layer's first), together covering every
// element exactly once. Consecutive layers are grouped while the group stays within
// `bucket_bytes` (of float32 elements); a layer is never split, and a layer that alone exceeds
// the size gets its own bucket. Layers of size 0 join the bucket of their neighbours; no bucket is
// empty (no layer with elements: no buckets). bucket_bytes 0 means one bucket for everything.
std::vector<Bucket> assign_buckets(const std::vector<size_t>& layer_sizes, size_t bucket_bytes);

// Bucket size in bytes for a --bucket-mb value (MiB, fractions allowed; 0 stays 0). UsageError for
// a negative or non-finite value.
size_t bucket_bytes_from_mb(double mb);

// Starts an all-reduce SUM per bucket as the backward pass completes the bucket's layers.
// layer_done(i) is called once per layer index in decreasing order (layers without gradients
// included); when it reaches a bucket's first layer that bucket's reduction starts, in place on
// `grads`. wait_all() waits for every started reduction and throws what they throw. With a bf16
// wire dtype each bucket is cast into a bf16 copy, reduced there and cast back at wait_all (by the
// CPU for host gradients, on the stream for device gradients).
//
// Device gradients (DeviceKind::cuda): a communicator that takes device buffers (nccl, or mpi
// staging them) reduces them in place, ordered after the stream's work (set_compute_stream); one
// that takes host buffers gets each bucket copied down into a host mirror when it starts (a
// synchronous copy, after the stream's work) and copied back up in wait_all.
//
// Sharded (ZeRO, DESIGN.md decision 19): each bucket is reduce-scattered instead of all-reduced,
// every bucket cut into size() equal blocks, block r the slice rank r owns. Stage 1: in place on
// the caller's whole buffer; after wait_all() only this rank's blocks (shard()) hold the sums, the
// rest of the buffer its own gradients. Every bucket's count must divide by size() (Error
// otherwise: the model pads its layout for it).
//
// Stage 2 (the gradients sharded too): there is no whole gradient buffer. The reducer owns a
// staging area where the model's layers write their gradients (gradient_at(), bound once) and the
// compact sums of this rank's blocks (sharded_grads(), in bucket order: the optimizer state's
// layout). The staging is a ring of two slots of the largest bucket: each bucket is written into
// its slot during the backward pass, reduce-scattered there, and its own block added into
// sharded_grads() when the slot is next needed or at wait_all(). Buckets holding an `early` layer
// (one whose gradients another layer adds to before its own turn: the target of a tied layer) get
// a region of their own instead. Every micro-batch's backward pass reduces (begin_micro_batch(),
// layer_done() for every micro-batch): accumulation costs one reduce-scatter per micro-batch, as
// in DeepSpeed's stage 2, and needs no whole buffer. Gradients in the caller's memory over a
// communicator that takes host buffers only (staged) are refused at stage 2.
// The communicator outlives the reducer. A reducer that orders the communicator after `stream`
// clears that again when it is destroyed (set_compute_stream(nullptr)), since the stream may be
// destroyed next while the communicator lives on.
class BucketReducer {
 public:
  // stage: 0 all-reduce, 1 or 2 ZeRO's (above). early: at stage 2, the layers whose gradients
  // are written before their bucket's turn.
  BucketReducer(Communicator& comm, std::vector<Bucket> buckets, Precision wire = Precision::fp32,
                DeviceKind grads_on = DeviceKind::cpu, cudaStream_t stream = nullptr, int stage = 0,
                const std::vector<int>& early = {});
  ~BucketReducer();
  BucketReducer(const BucketReducer&) = delete;
  BucketReducer& operator=(const BucketReducer&) = delete;

  // Forgets any handles of a previous step (they must have been waited for) and sets the buffer
  // (stage 2: null, the reducer's own; sharded_grads() is zeroed). `captured`: the step is being
  // captured into a CUDA graph on the reducer's stream (needs capturable()); it ends with join()
  // instead of wait_all().
  void start_step(float* grads, bool captured = false);
  // Stage 2: before each micro-batch's backward pass; makes the early buckets' regions and the
  // first bucket's slot ready (their earlier reductions retired, zeroed). Nothing at stages 0-1.
  void begin_micro_batch();
  void layer_done(int layer);
  // Starts every bucket not yet started (for a backward pass that reported no layers), then waits.
  void wait_all();
  // A captured step's wait_all(): starts the buckets not yet started, then makes the stream wait
  // for the reductions on the device (Communicator::join_stream) and casts a bf16 wire back there.
  // The host waits for nothing.
  void join();
  // Whether a step may be captured: device gradients, and a communicator whose collectives are
  // captured with the stream (nccl) or a world of one rank, where the sum over the ranks is the
  // rank's own gradient and a captured step issues no collective (a bf16 wire still rounds).
  bool capturable() const;
  // For a step that fails with reductions in flight: waits for those already started (no more are
  // started), together at most the communicator's timeout, and forgets them, so that none writes
  // into the gradients after the caller has unwound; their errors are dropped (the caller's
  // error is the one to report). The trainer calls it before rethrowing. Never throws.
  void drain() noexcept;
  const std::vector<Bucket>& buckets() const { return buckets_; }
  bool sharded() const { return stage_ > 0; }
  int stage() const { return stage_; }
  // Stage 2: where the gradients of the flat range starting at `flat_offset` (within one bucket)
  // are written; stable for the reducer's life. Error at stages 0-1.
  float* gradient_at(size_t flat_offset);
  // Stage 2: this rank's blocks of the reduced gradient, compact in bucket order (after
  // wait_all()); floats: the staging area and these together (memory reports).
  float* sharded_grads() { return shard_.data(); }
  size_t gradient_floats() const { return staging_.size() + shard_.size(); }
  // This rank's block of every bucket, in bucket order: the (offset, count) ranges of the flat
  // buffer a sharded reduction leaves summed here; every bucket whole when not sharded.
  std::vector<std::pair<size_t, size_t>> shard() const;

 private:
  void launch(size_t b);
  // Stage 2: bucket b's reduction (if one is in flight) waited for, landed and its own block
  // added into shard_.
  void retire(size_t b);
  // Stage 2: bucket b's region made ready for its layers' writes: the bucket that used it last
  // retired, then the region zeroed.
  void make_ready(size_t b);
  // After the reductions: every bucket landed.
  void cast_back();
  // Bucket b's reduced block, its reduction done: a staged block copied back up, a bf16 wire's
  // values cast back to fp32 in the gradients.
  void land(size_t b);

  // Where the reductions read and write offset `at` of grads_ (grads_ itself or the bf16 copy),
  // and their element size.
  void* wire_at(size_t at);
  size_t wire_bytes() const;
  // This rank's block of bucket b when sharded ({0, count} otherwise), relative to the bucket.
  std::pair<size_t, size_t> own_block(size_t b) const;

  Communicator& comm_;
  std::vector<Bucket> buckets_;
  Precision wire_;
  DeviceKind grads_on_;
  cudaStream_t stream_;
  bool staged_ = false;       // device gradients over a host-buffer communicator
  bool orders_comm_ = false;  // this reducer set the communicator's compute stream
  int stage_ = 0;             // 0 all-reduce; 1, 2: reduce-scatter (ZeRO)
  float* grads_ = nullptr;
  bool captured_ = false;     // the step in progress is captured (start_step)
  size_t next_ = 0;           // buckets [0, next_) have started
  bool in_backward_ = false;  // stage 2: a micro-batch's backward pass began (begin_micro_batch)
  std::vector<WorkHandle> work_;  // per bucket: its reduction in flight, if any
  // Per bucket: where it lies in grads_ (its flat offset; stage 2: in the staging area), and at
  // stage 2 its ring slot (-1: a region of its own) and its block's offset in shard_.
  std::vector<size_t> at_;
  std::vector<int> slot_;
  std::vector<size_t> shard_at_;
  std::vector<int> slot_holds_;    // stage 2: per ring slot, the bucket written there last (-1)
  Buffer<float> staging_, shard_;  // stage 2
  Buffer<uint16_t> wire_copy_;     // bf16 wire: the buckets' values in bf16, as at_
  std::vector<unsigned char> host_mirror_;  // staged: the wire values on the host, as at_
};

}  // namespace lockstep
