// GpuTrace: the --trace spans of work on one CUDA stream, timed by the device, on a named track of
// their own ("GPU stream: nccl").
//
// begin() and end() enqueue timing events on the stream around the work the caller enqueues in
// between; the host never waits for them. A span is resolved once its end event has completed:
// its device times become trace times through a reference event whose host time was read when it
// completed (host(ev) = t_ref + cudaEventElapsedTime(ref, ev)), and it is recorded with
// trace_span_on(). The reference is taken on an idle private stream at the first span of each
// trace session and again every few seconds when nothing is pending, so the two clocks cannot
// drift apart. Completed spans are resolved at the next begin() (cudaEventQuery, no waiting); the
// rest by the trace flush hook that write_trace() runs, which waits for them (for at most a few
// seconds: spans of work that never finishes are dropped rather than hanging the run).
//
// Memory is capped: events come from a pool and at most kMaxPendingSpans spans wait to be
// resolved; beyond that new spans are dropped, and the flush records a marker saying how many.
// When tracing is off, begin() costs one relaxed atomic load and end() one branch.
//
// Spans do not nest: a begin() without its end() (the enqueue in between threw) is dropped by the
// next begin(). begin/end come from one thread at a time (the one that enqueues on the stream, on
// the stream's device); the flush hook may run on another. The stream must outlive this object.
// The CPU build links gpu_trace_stub.cpp, which records nothing.
// Used by one thread, on the stream's device. No collective calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "kernels/cuda/stream.h"
#include "runtime/observe/trace.h"

namespace lockstep {

class GpuTrace {
 public:
  static constexpr size_t kMaxPendingSpans = 4096;

  // Takes the trace track `track_name` (trace_track) and registers the flush hook.
  GpuTrace(cudaStream_t stream, const std::string& track_name);
  ~GpuTrace();  // resolves the spans already complete, frees every event
  GpuTrace(const GpuTrace&) = delete;
  GpuTrace& operator=(const GpuTrace&) = delete;

  // Opens a span named `name` (a literal, or a string that outlives the call) at this point of
  // the stream; `bytes` >= 0 and a non-null `dtype` become the span's args.
  void begin(const char* name, int64_t bytes = -1, const char* dtype = nullptr) {
    if (tracing()) begin_traced(name, bytes, dtype, "gpu", -1);
  }
  // As begin(), in `category` (a literal: "forward", "backward", ...) rather than "gpu", and named
  // `name` followed by `index` when index >= 0 ("dense" and 6: "dense6", as the CPU's layer spans).
  void begin_span(const char* name, const char* category, int index = -1, int64_t bytes = -1) {
    if (tracing()) begin_traced(name, bytes, nullptr, category, index);
  }
  // Closes the open span at this point of the stream.
  void end() {
    if (open_) end_traced();
  }

  // Resolves every pending span, waiting for its events (what the flush hook does).
  void flush();

 private:
  struct State;
  void begin_traced(const char* name, int64_t bytes, const char* dtype, const char* category,
                    int index);
  void end_traced();

  std::unique_ptr<State> state_;
  bool open_ = false;  // a span is open; touched only by the begin/end thread
};

// A span of `trace`'s stream over a scope (begin_span at construction, end at destruction);
// nothing when `trace` is null.
class GpuSpan {
 public:
  GpuSpan(GpuTrace* trace, const char* name, const char* category) : trace_(trace) {
    if (trace_ != nullptr) trace_->begin_span(name, category);
  }
  ~GpuSpan() {
    if (trace_ != nullptr) trace_->end();
  }
  GpuSpan(const GpuSpan&) = delete;
  GpuSpan& operator=(const GpuSpan&) = delete;

 private:
  GpuTrace* trace_;
};

}  // namespace lockstep
