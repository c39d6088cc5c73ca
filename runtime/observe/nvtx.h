// NVTX ranges, so Nsight Systems (`nsys profile mpiexec ... lockstep-train`) shows where each
// rank's time goes: every TraceSpan (layers, collectives, evaluation, checkpoints) and every
// training phase (data wait, forward, backward, all_reduce, optimizer) opens a range, coloured by
// its category, and the helper threads carry names ("mpi progress", "prefetch").
//
// Ranges are emitted only when a profiler has injected itself (NVTX_INJECTION64_PATH is set, as
// nsys does) and the build found NVTX's header-only nvtx3 (CUDA Toolkit); otherwise every call here
// costs one load of a flag, with or without --trace. Thread-safe: ranges nest per thread.
#pragma once

namespace lockstep {

// Whether ranges are being emitted (decided once per process).
bool nvtx_enabled();

// Push/pop a range on the calling thread. `category` picks the colour and the NVTX category
// ("forward", "collective", ...); pass string literals or names that outlive the call.
void nvtx_push(const char* name, const char* category);
void nvtx_pop();

// Names the calling OS thread in the profiler's timeline.
void nvtx_name_thread(const char* name);

// One range over a scope.
class NvtxRange {
 public:
  NvtxRange(const char* name, const char* category) : on_(nvtx_enabled()) {
    if (on_) nvtx_push(name, category);
  }
  ~NvtxRange() {
    if (on_) nvtx_pop();
  }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;

 private:
  bool on_;
};

// The contiguous phases of a training step as ranges: next() closes the open one, if any, and
// opens the next; done() closes it. The destructor closes a range left open by an exception.
class NvtxPhases {
 public:
  NvtxPhases() : on_(nvtx_enabled()) {}
  ~NvtxPhases() { done(); }
  NvtxPhases(const NvtxPhases&) = delete;
  NvtxPhases& operator=(const NvtxPhases&) = delete;
  void next(const char* name, const char* category) {
    if (!on_) return;
    done();
    nvtx_push(name, category);
    open_ = true;
  }
  void done() {
    if (open_) nvtx_pop();
    open_ = false;
  }

 private:
  bool on_;
  bool open_ = false;
};

}  // namespace lockstep
