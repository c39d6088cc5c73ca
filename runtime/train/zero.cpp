#include "runtime/train/zero.h"

#include <algorithm>
#include <cmath>

#include "kernels/cast.h"
#include "kernels/step/optimizer.h"
#include "runtime/base/error.h"

namespace lockstep {

ZeroShard::ZeroShard(Communicator& grads, Communicator& host, const BucketReducer& reducer,
                     DeviceKind device, cudaStream_t stream, Precision wire)
    : grads_comm_(grads),
      host_(host),
      buckets_(reducer.buckets()),
      device_(device),
      stream_(stream),
      compact_(reducer.stage() == 2) {
  if (!reducer.sharded()) throw Error("ZeroShard: the gradient buckets are not sharded");
  for (const auto& [flat, count] : reducer.shard()) {
    segments_.push_back({flat, owned_, count});
    owned_ += count;
  }
  if (device_ == DeviceKind::cuda) norms_ = Buffer<double>(device_, segments_.size());
  if (wire == Precision::bf16) {
    size_t flat = 0;
    for (const Bucket& b : buckets_) flat = std::max(flat, b.offset + b.count);
    masters_ = Buffer<float>(device_, owned_);
    wire_ = Buffer<uint16_t>(device_, flat);
  }
}

void ZeroShard::adopt(Model& model) {
  if (!rounds()) return;
  wait();
  std::vector<float> whole = model.params_to_host();
  take(whole, masters_);
  // Rounded on the host, once: the same bits as the device's casts (kernels/cast.h).
  std::vector<uint16_t> words(whole.size());
  kernels::cast_f32_to_bf16_cpu(whole.data(), words.data(), whole.size());
  kernels::cast_bf16_to_f32_cpu(words.data(), whole.data(), whole.size());
  model.write_params(0, whole.data(), whole.size());
}

ParamRanges ZeroShard::to_compact(const ParamRanges& flat) const {
  ParamRanges out;
  for (const auto& [offset, count] : flat)
    for (const Optimizer::Segment& s : segments_) {
      const size_t begin = std::max(offset, s.flat),
                   end = std::min(offset + count, s.flat + s.count);
      if (begin < end) out.emplace_back(s.state + (begin - s.flat), end - begin);
    }
  return out;
}

double ZeroShard::global_norm(const float* grads) {
  // One norm per block; on a device each into device memory, read back together (one wait).
  std::vector<double> norms(segments_.size());
  for (size_t i = 0; i < segments_.size(); ++i) {
    const Optimizer::Segment& s = segments_[i];
    if (device_ == DeviceKind::cuda)
      kernels::global_norm_device_cuda(grads + at(s), s.count, norms_.data() + i, stream_);
    else
      norms[i] = kernels::global_norm_cpu(grads + at(s), s.count);
  }
  if (device_ == DeviceKind::cuda) norms_.read(norms.data(), 0, norms.size());
  double squares = 0;
  for (double n : norms) squares += n * n;
  host_.all_reduce(&squares, &squares, 1, DType::f64, ReduceOp::sum);
  return std::sqrt(squares);
}

void ZeroShard::clip(float* grads, double norm, double max_norm) {
  if (!(max_norm > 0) || !(norm > max_norm)) return;
  const auto factor = static_cast<float>(max_norm / norm);
  for (const Optimizer::Segment& s : segments_) {
    if (device_ == DeviceKind::cuda)
      kernels::scale_cuda(grads + at(s), s.count, factor, stream_);
    else
      kernels::scale_cpu(grads + at(s), s.count, factor);
  }
}

void ZeroShard::record_norm(const float* grads, double* norm) {
  if (device_ != DeviceKind::cuda)
    throw Error("ZeroShard::record_norm: a captured step is a GPU's");
  for (size_t i = 0; i < segments_.size(); ++i)
    kernels::global_norm_device_cuda(grads + at(segments_[i]), segments_[i].count,
                                     norms_.data() + i, stream_);
  kernels::sum_of_squares_device_cuda(norms_.data(), static_cast<int>(segments_.size()), norm,
                                      stream_);
  if (grads_comm_.size() > 1) {
    // Part of the capture: its handle is dropped, and its stream joined back into the capture
    // before the square root reads the sum.
    grads_comm_.all_reduce_async(norm, norm, 1, DType::f64, ReduceOp::sum);
    grads_comm_.join_stream(stream_);
  }
  kernels::sqrt_device_cuda(norm, stream_);
}

void ZeroShard::clip_on_device(float* grads, const double* norm, double max_norm) {
  for (const Optimizer::Segment& s : segments_)
    kernels::clip_by_device_norm_cuda(grads + at(s), s.count, norm, max_norm, stream_);
}

void ZeroShard::join() {
  if (!pending_.empty()) {
    for (WorkHandle& w : pending_) w.reset();  // their completion is part of the capture
    pending_.clear();
    grads_comm_.join_stream(stream_);
  }
  widen();
}

void ZeroShard::publish(float* params) {
  wait();
  if (rounds()) {
    // This rank's masters into its blocks of the bf16 buffer, which is gathered instead.
    for (const Optimizer::Segment& s : segments_) {
      if (device_ == DeviceKind::cuda)
        kernels::cast_f32_to_bf16_cuda(masters_.data() + s.state, wire_.data() + s.flat, s.count,
                                       stream_);
      else
        kernels::cast_f32_to_bf16_cpu(masters_.data() + s.state, wire_.data() + s.flat, s.count);
    }
    unwidened_ = params;
  }
  // One rank's block is its whole bucket, already in place: nothing to gather (nor, in a captured
  // step, a host-staged collective to issue).
  if (grads_comm_.size() == 1) return;
  // Every bucket in place: this rank's block is its send buffer (segments_ follow buckets_).
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const Optimizer::Segment& s = segments_[b];
    const size_t at = buckets_[b].offset;
    pending_.push_back(
        rounds() ? grads_comm_.all_gather_async(wire_.data() + s.flat, wire_.data() + at, s.count,
                                                DType::bf16)
                 : grads_comm_.all_gather_async(params + s.flat, params + at, s.count, DType::f32));
  }
}

void ZeroShard::wait() {
  for (WorkHandle& w : pending_) w->wait(grads_comm_.timeout());
  pending_.clear();
  widen();
}

void ZeroShard::widen() {
  if (unwidened_ == nullptr) return;
  for (const Bucket& b : buckets_) {
    if (device_ == DeviceKind::cuda)
      kernels::cast_bf16_to_f32_cuda(wire_.data() + b.offset, unwidened_ + b.offset, b.count,
                                     stream_);
    else
      kernels::cast_bf16_to_f32_cpu(wire_.data() + b.offset, unwidened_ + b.offset, b.count);
  }
  unwidened_ = nullptr;
}

std::vector<float> ZeroShard::full(const Buffer<float>& compact, size_t flat_count) {
  std::vector<float> mine = compact.to_host();
  std::vector<float> whole(flat_count, 0.0f);
  for (const Optimizer::Segment& s : segments_)
    std::copy_n(mine.begin() + static_cast<ptrdiff_t>(s.state), s.count,
                whole.begin() + static_cast<ptrdiff_t>(s.flat));
  for (size_t b = 0; b < buckets_.size(); ++b)
    host_.all_gather(whole.data() + segments_[b].flat, whole.data() + buckets_[b].offset,
                     segments_[b].count, DType::f32);
  return whole;
}

void ZeroShard::take(const std::vector<float>& full, Buffer<float>& compact) const {
  std::vector<float> mine(owned_);
  for (const Optimizer::Segment& s : segments_)
    std::copy_n(full.begin() + static_cast<ptrdiff_t>(s.flat), s.count,
                mine.begin() + static_cast<ptrdiff_t>(s.state));
  compact.write(mine.data(), 0, mine.size());
}

}  // namespace lockstep
