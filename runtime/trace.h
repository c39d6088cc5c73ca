// Trace: a span recorder that writes Chrome trace-event JSON (chrome://tracing, Perfetto).
//
// Tracing is off until start_tracing(); then any thread (the training thread, the communicator's
// progress thread, the loader's prefetch thread) may record spans, each appended under a mutex.
// When off, TraceSpan and trace_span cost one relaxed atomic load. Every rank records its own
// events with pid = its rank and tid = a small per-thread number (0: the thread that called
// start_tracing; the MPI backend's progress thread records each collective it runs, with its
// bytes, on its own track); write_trace() merges all ranks
// into one file. Times are microseconds since start_tracing(), which begins after a barrier, so the
// ranks' tracks line up to within that barrier's skew.
//
// GPU hook: a CUDA build records device spans from CUDA events (cudaEventElapsedTime from a
// stream's start event) through trace_span(), and may open NVTX ranges where TraceSpan opens; the
// recorder itself needs no device code.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/step_times.h"

namespace lockstep {

class Communicator;

// Collective (a barrier on `comm`): clears any earlier events and starts recording as rank
// comm.rank().
void start_tracing(Communicator& comm);
bool tracing();               // cheap: whether spans are being recorded
double trace_now_seconds();   // seconds since start_tracing (0 when off)

// Records one complete span [begin, end] (seconds since start_tracing) on the calling thread's
// track. `args` is a JSON object's members without braces ("\"bytes\": 4096") or empty.
void trace_span(const std::string& name, const char* category, double begin, double end,
                const std::string& args = {});

// A scope recorded as one span, and an NVTX range for Nsight while a profiler is attached
// (nvtx.h). The name is built only when one of them is on: pass a literal, or a literal and an
// index ("dense" and 6 -> "dense6").
class TraceSpan {
 public:
  TraceSpan(const char* name, const char* category, int index = -1, int64_t bytes = -1);
  ~TraceSpan();
  TraceSpan(const TraceSpan&) = delete;
  TraceSpan& operator=(const TraceSpan&) = delete;

 private:
  const char* name_;
  const char* category_;
  int index_;
  int64_t bytes_;
  double begin_ = -1;  // < 0: tracing was off at construction
  bool nvtx_ = false;  // an NVTX range is open (nvtx.h)
};

// A trainer phase hook (Trainer::set_phase_hook) that records each phase as a span: "data wait",
// "forward", "backward", "all_reduce" (with `grad_bytes`, the gradient buffer it reduces),
// "optimizer". The hook runs as a phase ends, so the span ends now and lasts end - begin.
PhaseHook trace_phase_hook(int64_t grad_bytes);

// Collective: stops recording and writes every rank's events to `path` as one JSON object
// ({"traceEvents": [...]}). Each rank writes <path>.rank<r>; after a barrier rank 0 concatenates
// them into `path` and removes the parts. Throws UsageError naming --trace when a file cannot be
// written (on the rank that failed; the caller's agree step makes the others follow).
void write_trace(Communicator& comm, const std::string& path);

// The recorded events as JSON array members (no brackets), for tests and write_trace.
std::string trace_events_json();

}  // namespace lockstep
