// What the *_onednn.cpp files share (not part of the kernels' API; only they include it): the CPU
// engine, this thread's stream, the staging of an operand between the caller's layout and the one
// a primitive chose, and the per-thread primitive cache (onednn.h states its contract). oneDNN 2.x
// (v2 API: operation descriptors, then primitive descriptors).
#pragma once

#include <array>
#include <map>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <utility>

namespace lockstep::kernels::onednn {

dnnl::engine& engine();
// This thread's stream. CPU execution with the OpenMP runtime is in order and done when execute
// returns; callers still wait() before handing results back.
dnnl::stream& stream();

// One operand of a primitive: the caller's buffer in its own layout (NHWC, HWIO, row-major), and
// the layout the primitive chose. Where they differ, the operand goes through a buffer of this
// object in the primitive's layout and a reorder, created once. An accumulated output always goes
// through the buffer and is added (+=) into the caller's by a reorder with a sum post-op.
class Staged {
 public:
  enum class Role { input, output, accumulate };
  Staged() = default;
  Staged(Role role, const dnnl::memory::desc& user, const dnnl::memory::desc& wanted);

  // An input: the memory to pass to the primitive, holding `data` in the primitive's layout.
  dnnl::memory& in(const void* data);
  // An output: the memory the primitive writes; finish() then moves (or adds) it into `data`.
  dnnl::memory& out(void* data);
  void finish();
  // Whether the operand goes through a reorder (the primitive chose another layout; always for an
  // accumulated output).
  bool reorders() const { return staged_; }

 private:
  dnnl::memory user_, own_;
  dnnl::reorder reorder_;
  bool staged_ = false;
};

// The scratchpad attribute every primitive here is created with: the entry owns the scratchpad
// (allocated once), instead of the library allocating one per execution.
dnnl::primitive_attr user_scratchpad(dnnl::primitive_attr attr = {});

// The threads oneDNN plans a primitive created now for: this thread's OpenMP count (1 inside the
// rank's lanes and the k-split's parts, which set it so: kernels/step/thread_lanes.h,
// gemm_onednn.cpp). A primitive runs on as many threads as it was planned for, or on one inside a
// parallel region (oneDNN's own rule): planned for two and run on one, a convolution's weight
// gradient waited forever at its own barrier.
int planning_threads();

// This thread's entry for `key` at planning_threads(), created by make() on the first call with
// both: a primitive planned for a team is never run inside a lane, nor the other way round.
template <class Entry, size_t N, class Make>
Entry& cached(const std::array<long, N>& key, Make make) {
  thread_local std::map<std::pair<int, std::array<long, N>>, std::unique_ptr<Entry>> cache;
  const auto full = std::make_pair(planning_threads(), key);
  auto it = cache.find(full);
  if (it == cache.end()) it = cache.emplace(full, std::make_unique<Entry>(make())).first;
  return *it->second;
}

// Rethrows a oneDNN error as std::runtime_error naming the kernel, the status and what failed.
[[noreturn]] void rethrow(const char* who, const dnnl::error& e);

}  // namespace lockstep::kernels::onednn
