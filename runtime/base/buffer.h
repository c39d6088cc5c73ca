// Buffer<T>: an array of T in host memory or in CUDA device memory, for the model's and the
// optimizer's buffers (parameters, gradients, activations, optimizer state), which live where the
// model computes. Zero-filled when made; move-only; owns its memory.
//
// Host code never dereferences a device buffer's data(): values cross over only through the
// explicit copies below, which are synchronous. Device copies go through the legacy default
// stream, so they wait for the work already queued on every blocking stream (the trainer's compute
// stream is one), and a value read back is the one the kernels wrote. Used by one thread.
// No collective calls.
#pragma once

#include <cstddef>
#include <vector>

#include "runtime/base/device_kind.h"

namespace lockstep {

// The untyped part: bytes on a DeviceKind.
class RawBuffer {
 public:
  RawBuffer() = default;
  RawBuffer(DeviceKind where, size_t bytes);
  ~RawBuffer();
  RawBuffer(RawBuffer&& other) noexcept;
  RawBuffer& operator=(RawBuffer&& other) noexcept;
  RawBuffer(const RawBuffer&) = delete;
  RawBuffer& operator=(const RawBuffer&) = delete;

  void* data() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  DeviceKind where() const { return where_; }
  void read(void* host_dst, size_t offset, size_t bytes) const;   // this -> host
  void write(const void* host_src, size_t offset, size_t bytes);  // host -> this
  void zero();

 private:
  void release() noexcept;
  DeviceKind where_ = DeviceKind::cpu;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

template <class T>
class Buffer {
 public:
  Buffer() = default;
  Buffer(DeviceKind where, size_t count) : raw_(where, count * sizeof(T)), count_(count) {}

  T* data() { return static_cast<T*>(raw_.data()); }
  const T* data() const { return static_cast<const T*>(raw_.data()); }
  size_t size() const { return count_; }
  bool empty() const { return count_ == 0; }
  DeviceKind where() const { return raw_.where(); }

  // Elements [offset, offset + count) to or from host memory.
  void read(T* host_dst, size_t offset, size_t count) const {
    raw_.read(host_dst, offset * sizeof(T), count * sizeof(T));
  }
  void write(const T* host_src, size_t offset, size_t count) {
    raw_.write(host_src, offset * sizeof(T), count * sizeof(T));
  }
  std::vector<T> to_host() const {
    std::vector<T> out(count_);
    read(out.data(), 0, count_);
    return out;
  }
  void zero() { raw_.zero(); }

 private:
  RawBuffer raw_;
  size_t count_ = 0;
};

}  // namespace lockstep
