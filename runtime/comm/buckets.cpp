#include "runtime/comm/buckets.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>

#include "kernels/cast.h"
#include "kernels/cuda/memory.h"
#include "runtime/base/error.h"

namespace lockstep {

std::vector<Bucket> assign_buckets(const std::vector<size_t>& layer_sizes, size_t bucket_bytes) {
  std::vector<size_t> offsets(layer_sizes.size());
  size_t total = 0;
  for (size_t i = 0; i < layer_sizes.size(); ++i) {
    offsets[i] = total;
    total += layer_sizes[i];
  }
  std::vector<Bucket> out;
  if (total == 0) return out;
  // Elements per bucket; 0: no limit. A positive size under one element still means one layer each.
  const size_t limit = bucket_bytes == 0 ? 0 : std::max<size_t>(1, bucket_bytes / sizeof(float));
  Bucket open;
  bool has_open = false;
  for (size_t k = layer_sizes.size(); k-- > 0;) {
    const int layer = static_cast<int>(k);
    const size_t n = layer_sizes[k];
    // A layer joins the open bucket unless that would take the bucket past the limit; zero-size
    // layers always join, so they never make a bucket of their own.
    if (has_open && (limit == 0 || n == 0 || open.count == 0 || open.count + n <= limit)) {
      open.offset = offsets[k];
      open.count += n;
      open.first_layer = layer;
      continue;
    }
    if (has_open) out.push_back(open);
    open = Bucket{offsets[k], n, layer, layer};
    has_open = true;
  }
  // An open bucket with no elements takes the next layer whatever its size, so with total > 0 no
  // bucket ends up empty.
  out.push_back(open);
  // Zero-size layers at the low end of a bucket move to the next one, so a bucket starts as soon
  // as its lowest layer with gradients is done rather than after the parameterless layers below.
  for (size_t b = 0; b + 1 < out.size(); ++b)
    while (out[b].first_layer < out[b].last_layer && layer_sizes[out[b].first_layer] == 0) {
      out[b].first_layer += 1;
      out[b + 1].last_layer += 1;
    }
  return out;
}

size_t bucket_bytes_from_mb(double mb) {
  if (!std::isfinite(mb) || mb < 0 || mb > 1024.0 * 1024.0)
    throw UsageError("--bucket-mb must be between 0 (one all-reduce) and 1048576, not " +
                     std::to_string(mb));
  return static_cast<size_t>(std::llround(mb * 1024.0 * 1024.0));
}

BucketReducer::BucketReducer(Communicator& comm, std::vector<Bucket> buckets, Precision wire,
                             DeviceKind grads_on, cudaStream_t stream, bool sharded)
    : comm_(comm),
      buckets_(std::move(buckets)),
      wire_(wire),
      grads_on_(grads_on),
      stream_(stream),
      staged_(grads_on == DeviceKind::cuda && !comm.device_buffers()),
      sharded_(sharded) {
  if (sharded_)
    for (const Bucket& k : buckets_)
      if (k.count % static_cast<size_t>(comm_.size()) != 0)
        throw Error("BucketReducer: a sharded bucket of " + std::to_string(k.count) +
                    " elements does not divide by the " + std::to_string(comm_.size()) +
                    " ranks (the model's layout is padded for sharding: ModelPlacement)");
  // Buckets run from the end of the buffer down: the first one reaches its end.
  const size_t total = buckets_.empty() ? 0 : buckets_.front().offset + buckets_.front().count;
  if (wire_ == Precision::bf16) wire_copy_ = Buffer<uint16_t>(grads_on_, total);
  if (staged_) host_mirror_.resize(total * wire_bytes());
  orders_comm_ = grads_on_ == DeviceKind::cuda && comm_.device_buffers();
  if (orders_comm_) comm_.set_compute_stream(stream_);
}

BucketReducer::~BucketReducer() {
  if (orders_comm_) comm_.set_compute_stream(nullptr);
}

size_t BucketReducer::wire_bytes() const {
  return wire_ == Precision::bf16 ? sizeof(uint16_t) : sizeof(float);
}

void* BucketReducer::wire_ptr(const Bucket& k) {
  if (wire_ == Precision::bf16) return wire_copy_.data() + k.offset;
  return grads_ + k.offset;
}

std::pair<size_t, size_t> BucketReducer::reduced_part(const Bucket& k) const {
  if (!sharded_) return {k.offset, k.count};
  const size_t block = k.count / static_cast<size_t>(comm_.size());
  return {k.offset + static_cast<size_t>(comm_.rank()) * block, block};
}

std::vector<std::pair<size_t, size_t>> BucketReducer::shard() const {
  std::vector<std::pair<size_t, size_t>> out;
  for (const Bucket& k : buckets_) out.push_back(reduced_part(k));
  return out;
}

void BucketReducer::start_step(float* grads, bool captured) {
  if (captured && !capturable())
    throw Error(
        "BucketReducer: this step cannot be captured (host gradients, or a communicator "
        "that stages device buffers through the host)");
  grads_ = grads;
  captured_ = captured;
  next_ = 0;
  pending_.clear();
}

bool BucketReducer::capturable() const {
  return grads_on_ == DeviceKind::cuda && (comm_.capturable() || comm_.size() == 1);
}

void BucketReducer::launch(size_t b) {
  const Bucket& k = buckets_[b];
  const bool device = grads_on_ == DeviceKind::cuda;
  if (wire_ == Precision::bf16) {
    uint16_t* w = wire_copy_.data() + k.offset;
    if (device)
      kernels::cast_f32_to_bf16_cuda(grads_ + k.offset, w, k.count, stream_);
    else
      kernels::cast_f32_to_bf16_cpu(grads_ + k.offset, w, k.count);
  }
  // A captured step of one rank that the communicator cannot capture: the sum over one rank is
  // the rank's own values, already in place.
  if (captured_ && !comm_.capturable()) return;
  const DType type = wire_ == Precision::bf16 ? DType::bf16 : DType::f32;
  void* buf = wire_ptr(k);
  if (staged_) {
    // A synchronous copy through the legacy default stream: after the kernels that wrote it.
    unsigned char* host = host_mirror_.data() + k.offset * wire_bytes();
    kernels::cuda_copy_to_host(host, buf, k.count * wire_bytes());
    buf = host;
  }
  if (sharded_) {
    // In place: this rank's block of the bucket receives the sums of that block.
    const size_t block = k.count / static_cast<size_t>(comm_.size());
    void* own =
        static_cast<unsigned char*>(buf) + static_cast<size_t>(comm_.rank()) * block * wire_bytes();
    pending_.push_back(comm_.reduce_scatter_async(buf, own, block, type, ReduceOp::sum));
    return;
  }
  pending_.push_back(comm_.all_reduce_async(buf, buf, k.count, type, ReduceOp::sum));
}

void BucketReducer::layer_done(int layer) {
  while (next_ < buckets_.size() && layer <= buckets_[next_].first_layer) launch(next_++);
}

void BucketReducer::drain() noexcept {
  if (captured_) {
    // Issued into a capture that is abandoned: they never run, and their events were recorded
    // in the capture only, so there is nothing to wait for.
    pending_.clear();
    next_ = buckets_.size();
    return;
  }
  const auto deadline = std::chrono::steady_clock::now() + comm_.timeout();
  for (WorkHandle& w : pending_) {
    const auto left =
        std::chrono::duration_cast<Millis>(deadline - std::chrono::steady_clock::now());
    try {
      w->wait(std::max(left, Millis(0)));
    } catch (...) {
      // Already failing: the first error is the one reported.
    }
  }
  pending_.clear();
  next_ = buckets_.size();  // nothing more starts before the next start_step
}

void BucketReducer::wait_all() {
  if (captured_) throw Error("BucketReducer: a captured step ends with join(), not wait_all()");
  while (next_ < buckets_.size()) launch(next_++);
  for (WorkHandle& w : pending_) w->wait(comm_.timeout());
  pending_.clear();
  cast_back();
}

void BucketReducer::join() {
  if (!captured_) throw Error("BucketReducer: join() ends a captured step only");
  while (next_ < buckets_.size()) launch(next_++);
  if (!pending_.empty()) comm_.join_stream(stream_);
  pending_.clear();  // their completion events are part of the capture; nobody polls them
  cast_back();
}

void BucketReducer::cast_back() {
  for (const Bucket& whole : buckets_) {
    const auto [offset, count] = reduced_part(whole);
    if (staged_ && !captured_) {
      const Bucket part{offset, count, whole.first_layer, whole.last_layer};
      kernels::cuda_copy_to_device(wire_ptr(part), host_mirror_.data() + offset * wire_bytes(),
                                   count * wire_bytes());
    }
    if (wire_ != Precision::bf16) continue;
    if (grads_on_ == DeviceKind::cuda)
      kernels::cast_bf16_to_f32_cuda(wire_copy_.data() + offset, grads_ + offset, count, stream_);
    else
      kernels::cast_bf16_to_f32_cpu(wire_copy_.data() + offset, grads_ + offset, count);
  }
}

}  // namespace lockstep
