#include "runtime/comm/buckets.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>

#include "kernels/cast.h"
#include "kernels/cuda/memory.h"
#include "kernels/gpt/residual.h"
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
                             DeviceKind grads_on, cudaStream_t stream, int stage,
                             const std::vector<int>& early)
    : comm_(comm),
      buckets_(std::move(buckets)),
      wire_(wire),
      grads_on_(grads_on),
      stream_(stream),
      staged_(grads_on == DeviceKind::cuda && !comm.device_buffers()),
      stage_(stage) {
  if (stage_ < 0 || stage_ > 2)
    throw Error("BucketReducer: ZeRO stage " + std::to_string(stage_) + " (0, 1 or 2)");
  const size_t n = buckets_.size();
  if (stage_ > 0)
    for (const Bucket& k : buckets_)
      if (k.count % static_cast<size_t>(comm_.size()) != 0)
        throw Error("BucketReducer: a sharded bucket of " + std::to_string(k.count) +
                    " elements does not divide by the " + std::to_string(comm_.size()) +
                    " ranks (the model's layout is padded for sharding: ModelPlacement)");
  if (stage_ == 2 && staged_)
    throw Error(
        "BucketReducer: ZeRO stage 2 needs a communicator that reduces the gradients where "
        "they are (device gradients over a host-buffer communicator are staged)");
  work_.resize(n);
  at_.resize(n);
  // Buckets run from the end of the buffer down: the first one reaches its end.
  size_t extent = buckets_.empty() ? 0 : buckets_.front().offset + buckets_.front().count;
  if (stage_ == 2) {
    // The ring's buckets take turns in two slots of the largest one; a bucket with an early layer
    // gets a region of its own after them. Counts are multiples of the layout's alignment, so
    // every region (and every rank's block in it) stays aligned.
    std::vector<bool> own(n, false);
    size_t slot_floats = 0, ring = 0, ring_floats = 0;
    for (size_t b = 0; b < n; ++b) {
      for (int layer : early)
        own[b] = own[b] || (buckets_[b].first_layer <= layer && layer <= buckets_[b].last_layer);
      if (own[b]) continue;
      slot_floats = std::max(slot_floats, buckets_[b].count);
      ring += 1;
      ring_floats += buckets_[b].count;
    }
    // Two slots of the largest bucket that would hold as much as the ring's buckets together
    // (a model of one or two buckets, or one whose largest layer is half of the ring) gain
    // nothing: every bucket then has a region of its own, the whole buffer as at stage 1.
    size_t slots = std::min<size_t>(ring, 2);
    if (slots * slot_floats >= ring_floats) {
      slots = 0;
      std::fill(own.begin(), own.end(), true);
    }
    extent = slots * slot_floats;
    slot_.assign(n, -1);
    slot_holds_.assign(slots, -1);
    for (size_t b = 0, k = 0; b < n; ++b) {
      if (own[b]) {
        at_[b] = extent;
        extent += buckets_[b].count;
      } else {
        slot_[b] = static_cast<int>(k++ % slots);
        at_[b] = static_cast<size_t>(slot_[b]) * slot_floats;
      }
    }
    size_t owned = 0;
    for (size_t b = 0; b < n; ++b) {
      shard_at_.push_back(owned);
      owned += own_block(b).second;
    }
    staging_ = Buffer<float>(grads_on_, extent);
    shard_ = Buffer<float>(grads_on_, owned);
  } else {
    for (size_t b = 0; b < n; ++b) at_[b] = buckets_[b].offset;
  }
  if (wire_ == Precision::bf16) wire_copy_ = Buffer<uint16_t>(grads_on_, extent);
  if (staged_) host_mirror_.resize(extent * wire_bytes());
  orders_comm_ = grads_on_ == DeviceKind::cuda && comm_.device_buffers();
  if (orders_comm_) comm_.set_compute_stream(stream_);
}

BucketReducer::~BucketReducer() {
  if (orders_comm_) comm_.set_compute_stream(nullptr);
}

size_t BucketReducer::wire_bytes() const {
  return wire_ == Precision::bf16 ? sizeof(uint16_t) : sizeof(float);
}

void* BucketReducer::wire_at(size_t at) {
  if (wire_ == Precision::bf16) return wire_copy_.data() + at;
  return grads_ + at;
}

std::pair<size_t, size_t> BucketReducer::own_block(size_t b) const {
  const Bucket& k = buckets_[b];
  if (stage_ == 0) return {0, k.count};
  const size_t block = k.count / static_cast<size_t>(comm_.size());
  return {static_cast<size_t>(comm_.rank()) * block, block};
}

std::vector<std::pair<size_t, size_t>> BucketReducer::shard() const {
  std::vector<std::pair<size_t, size_t>> out;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const auto [offset, count] = own_block(b);
    out.emplace_back(buckets_[b].offset + offset, count);
  }
  return out;
}

float* BucketReducer::gradient_at(size_t flat_offset) {
  if (stage_ != 2) throw Error("BucketReducer::gradient_at: the gradients are the caller's");
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const Bucket& k = buckets_[b];
    if (k.offset <= flat_offset && flat_offset < k.offset + k.count)
      return staging_.data() + at_[b] + (flat_offset - k.offset);
  }
  throw Error("BucketReducer::gradient_at: offset " + std::to_string(flat_offset) +
              " is in no bucket");
}

void BucketReducer::start_step(float* grads, bool captured) {
  if (captured && !capturable())
    throw Error(
        "BucketReducer: this step cannot be captured (host gradients, a communicator that "
        "stages device buffers through the host, or ZeRO stage 2)");
  if (stage_ == 2) {
    if (grads != nullptr) throw Error("BucketReducer: at ZeRO stage 2 the gradients are its own");
    grads = staging_.data();
    if (grads_on_ == DeviceKind::cuda)
      kernels::cuda_zero(shard_.data(), shard_.size() * sizeof(float), stream_);
    else
      std::fill(shard_.data(), shard_.data() + shard_.size(), 0.0f);
    std::fill(slot_holds_.begin(), slot_holds_.end(), -1);
  }
  grads_ = grads;
  captured_ = captured;
  next_ = 0;
  in_backward_ = false;
  for (WorkHandle& w : work_) w.reset();
}

bool BucketReducer::capturable() const {
  return grads_on_ == DeviceKind::cuda && stage_ < 2 && (comm_.capturable() || comm_.size() == 1);
}

void BucketReducer::launch(size_t b) {
  const Bucket& k = buckets_[b];
  const bool device = grads_on_ == DeviceKind::cuda;
  if (wire_ == Precision::bf16) {
    uint16_t* w = wire_copy_.data() + at_[b];
    if (device)
      kernels::cast_f32_to_bf16_cuda(grads_ + at_[b], w, k.count, stream_);
    else
      kernels::cast_f32_to_bf16_cpu(grads_ + at_[b], w, k.count);
  }
  // A captured step of one rank that the communicator cannot capture: the sum over one rank is
  // the rank's own values, already in place.
  if (captured_ && !comm_.capturable()) return;
  const DType type = wire_ == Precision::bf16 ? DType::bf16 : DType::f32;
  void* buf = wire_at(at_[b]);
  if (staged_) {
    // A synchronous copy through the legacy default stream: after the kernels that wrote it.
    unsigned char* host = host_mirror_.data() + at_[b] * wire_bytes();
    kernels::cuda_copy_to_host(host, buf, k.count * wire_bytes());
    buf = host;
  }
  if (stage_ > 0) {
    // In place: this rank's block of the bucket receives the sums of that block.
    const auto [offset, block] = own_block(b);
    void* own = static_cast<unsigned char*>(buf) + offset * wire_bytes();
    work_[b] = comm_.reduce_scatter_async(buf, own, block, type, ReduceOp::sum);
    return;
  }
  work_[b] = comm_.all_reduce_async(buf, buf, k.count, type, ReduceOp::sum);
}

void BucketReducer::begin_micro_batch() {
  if (stage_ != 2) return;
  // The previous micro-batch's buckets that no layer report started (a view at the bottom).
  if (in_backward_)
    while (next_ < buckets_.size()) launch(next_++);
  in_backward_ = true;
  next_ = 0;
  for (size_t b = 0; b < buckets_.size(); ++b)
    if (slot_[b] < 0) make_ready(b);
  if (!buckets_.empty() && slot_[0] >= 0) make_ready(0);
}

void BucketReducer::layer_done(int layer) {
  while (next_ < buckets_.size() && layer <= buckets_[next_].first_layer) {
    // At stage 2 the next bucket's slot is made ready when this one starts: a layer below the
    // bucket's first reporting first has already written into a slot that was not.
    if (stage_ == 2 && layer < buckets_[next_].first_layer && next_ + 1 < buckets_.size() &&
        slot_[next_ + 1] >= 0)
      throw Error("BucketReducer: layer " + std::to_string(layer) + " reported before layer " +
                  std::to_string(buckets_[next_].first_layer) +
                  ", the first of its bucket: ZeRO stage 2 needs each bucket's first layer to "
                  "report");
    launch(next_++);
    if (stage_ == 2 && next_ < buckets_.size() && slot_[next_] >= 0) make_ready(next_);
  }
}

void BucketReducer::make_ready(size_t b) {
  const int s = slot_[b];
  if (s >= 0) {
    if (slot_holds_[s] >= 0) retire(static_cast<size_t>(slot_holds_[s]));
    slot_holds_[s] = static_cast<int>(b);
  } else {
    retire(b);
  }
  float* region = staging_.data() + at_[b];
  const size_t count = buckets_[b].count;
  if (grads_on_ == DeviceKind::cuda)
    kernels::cuda_zero(region, count * sizeof(float), stream_);
  else
    std::fill(region, region + count, 0.0f);
}

void BucketReducer::retire(size_t b) {
  if (!work_[b]) return;
  work_[b]->wait(comm_.timeout());
  work_[b].reset();
  land(b);
  const auto [offset, count] = own_block(b);
  float* own = grads_ + at_[b] + offset;
  float* into = shard_.data() + shard_at_[b];
  if (grads_on_ == DeviceKind::cuda)
    kernels::residual_accumulate_cuda(own, into, count, stream_);
  else
    kernels::residual_accumulate_cpu(own, into, count);
}

void BucketReducer::drain() noexcept {
  if (captured_) {
    // Issued into a capture that is abandoned: they never run, and their events were recorded
    // in the capture only, so there is nothing to wait for.
    for (WorkHandle& w : work_) w.reset();
    next_ = buckets_.size();
    return;
  }
  const auto deadline = std::chrono::steady_clock::now() + comm_.timeout();
  for (WorkHandle& w : work_) {
    if (!w) continue;
    const auto left =
        std::chrono::duration_cast<Millis>(deadline - std::chrono::steady_clock::now());
    try {
      w->wait(std::max(left, Millis(0)));
    } catch (...) {
      // Already failing: the first error is the one reported.
    }
    w.reset();
  }
  next_ = buckets_.size();  // nothing more starts before the next start_step
  in_backward_ = false;
}

void BucketReducer::wait_all() {
  if (captured_) throw Error("BucketReducer: a captured step ends with join(), not wait_all()");
  while (next_ < buckets_.size()) launch(next_++);
  in_backward_ = false;
  if (stage_ == 2) {
    for (size_t b = 0; b < buckets_.size(); ++b) retire(b);
    return;
  }
  for (WorkHandle& w : work_)
    if (w) w->wait(comm_.timeout());
  for (WorkHandle& w : work_) w.reset();
  cast_back();
}

void BucketReducer::join() {
  if (!captured_) throw Error("BucketReducer: join() ends a captured step only");
  while (next_ < buckets_.size()) launch(next_++);
  bool any = false;
  for (WorkHandle& w : work_) {
    any = any || w != nullptr;
    w.reset();  // their completion events are part of the capture; nobody polls them
  }
  if (any) comm_.join_stream(stream_);
  cast_back();
}

void BucketReducer::cast_back() {
  for (size_t b = 0; b < buckets_.size(); ++b) land(b);
}

void BucketReducer::land(size_t b) {
  const auto [offset, count] = own_block(b);
  const size_t at = at_[b] + offset;
  if (staged_ && !captured_)
    kernels::cuda_copy_to_device(wire_at(at), host_mirror_.data() + at * wire_bytes(),
                                 count * wire_bytes());
  if (wire_ != Precision::bf16) return;
  if (grads_on_ == DeviceKind::cuda)
    kernels::cast_bf16_to_f32_cuda(wire_copy_.data() + at, grads_ + at, count, stream_);
  else
    kernels::cast_bf16_to_f32_cpu(wire_copy_.data() + at, grads_ + at, count);
}

}  // namespace lockstep
