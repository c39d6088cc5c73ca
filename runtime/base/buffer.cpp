#include "runtime/base/buffer.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <utility>

#include "kernels/cuda/memory.h"
#include "runtime/base/error.h"

namespace lockstep {

RawBuffer::RawBuffer(DeviceKind where, size_t bytes) : where_(where), bytes_(bytes) {
  if (bytes == 0) return;
  if (where == DeviceKind::cuda) {
    ptr_ = kernels::cuda_alloc(bytes);
  } else {
    ptr_ = std::malloc(bytes);
    if (ptr_ == nullptr) throw std::bad_alloc();
  }
  zero();
}

RawBuffer::~RawBuffer() { release(); }

RawBuffer::RawBuffer(RawBuffer&& other) noexcept
    : where_(other.where_),
      ptr_(std::exchange(other.ptr_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)) {}

RawBuffer& RawBuffer::operator=(RawBuffer&& other) noexcept {
  if (this != &other) {
    release();
    where_ = other.where_;
    ptr_ = std::exchange(other.ptr_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void RawBuffer::release() noexcept {
  if (ptr_ == nullptr) return;
  if (where_ == DeviceKind::cuda)
    kernels::cuda_free(ptr_);
  else
    std::free(ptr_);
  ptr_ = nullptr;
}

namespace {

void check_range(size_t offset, size_t bytes, size_t size, const char* what) {
  if (offset > size || bytes > size - offset)
    throw Error(std::string("Buffer::") + what + ": bytes [" + std::to_string(offset) + ", " +
                std::to_string(offset + bytes) + ") outside a buffer of " + std::to_string(size));
}

}  // namespace

void RawBuffer::read(void* host_dst, size_t offset, size_t bytes) const {
  check_range(offset, bytes, bytes_, "read");
  if (bytes == 0) return;
  const char* src = static_cast<const char*>(ptr_) + offset;
  if (where_ == DeviceKind::cuda)
    kernels::cuda_copy_to_host(host_dst, src, bytes);
  else
    std::memcpy(host_dst, src, bytes);
}

void RawBuffer::write(const void* host_src, size_t offset, size_t bytes) {
  check_range(offset, bytes, bytes_, "write");
  if (bytes == 0) return;
  char* dst = static_cast<char*>(ptr_) + offset;
  if (where_ == DeviceKind::cuda)
    kernels::cuda_copy_to_device(dst, host_src, bytes);
  else
    std::memcpy(dst, host_src, bytes);
}

void RawBuffer::zero() {
  if (bytes_ == 0) return;
  if (where_ == DeviceKind::cuda)
    kernels::cuda_zero(ptr_, bytes_, nullptr);  // the legacy default stream: before later work
  else
    std::memset(ptr_, 0, bytes_);
}

}  // namespace lockstep
