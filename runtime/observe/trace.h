// Trace, the recorder: spans of this rank in memory, as Chrome trace-event JSON (chrome://tracing,
// Perfetto). It talks to no other rank: starting a trace on every rank and writing the merged file
// is trace_writer.h's job (start_tracing, write_trace).
//
// Tracing is off until start_recording() (programs: start_tracing()); then any thread (the
// training thread, the communicator's progress thread, the loader's prefetch thread) may record
// spans, each appended under a mutex. When off, TraceSpan and trace_span cost one relaxed atomic
// load. Every rank records its own events with pid = its rank and tid = a small per-thread number
// (0: the thread that started recording; the MPI backend's progress thread records each
// collective it runs, with its bytes, on its own track, and the calling thread the small blocking
// ones it runs itself); write_trace() merges all ranks into one
// file. Times are microseconds since the start, which start_tracing() takes after a barrier, so
// the ranks' tracks line up to within that barrier's skew.
//
// Named tracks carry spans that no host thread records as they happen: a CUDA build's GpuTrace
// (gpu_trace.h) times work on a stream with CUDA events and, once the events have completed,
// records each span with trace_span_on() on a track such as "GPU stream: nccl". Such recorders
// register a flush hook that write_trace() runs first, to resolve what is still pending. The
// recorder itself needs no device code.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "runtime/observe/step_times.h"

namespace lockstep {

// Clears any earlier events and starts recording as rank `rank`; the calling thread's track is 0.
// Programs call start_tracing (trace_writer.h), which lines the ranks' clocks up with a barrier
// first. stop_recording() ends recording; the events stay until the next start.
void start_recording(int rank);
void stop_recording();
bool tracing();              // cheap: whether spans are being recorded
double trace_now_seconds();  // seconds since start_tracing (0 when off)

// Records one complete span [begin, end] (seconds since start_tracing) on the calling thread's
// track. `args` is a JSON object's members without braces ("\"bytes\": 4096") or empty.
void trace_span(const std::string& name, const char* category, double begin, double end,
                const std::string& args = {});

// A track of its own whose name in the trace is `name` (e.g. "GPU stream: nccl"), numbered after
// the threads' tracks; asking again for a name gives the same track. Tracks outlive
// start_tracing(), so a recorder may take one before tracing starts. Any thread, any time.
int trace_track(const std::string& name);

// As trace_span, on `track` (from trace_track) instead of the calling thread's.
void trace_span_on(int track, const std::string& name, const char* category, double begin,
                   double end, const std::string& args = {});

// Counts start_tracing() calls (0 before the first). A recorder holding state across spans (a
// device clock reference, spans not yet resolved) drops that state when the session changes.
uint64_t trace_session();

// Flush hooks: run by flush_trace(), which write_trace() calls first (tracing still on), so that a
// recorder can add the spans it still holds. Hooks run one at a time on the flushing thread;
// removing a hook waits for a flush in progress, so a hook must not remove itself.
int add_trace_flush_hook(std::function<void()> hook);  // returns the id for remove
void remove_trace_flush_hook(int id);
void flush_trace();

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
// "optimizer", at the times the hook is given (steady_seconds(), however late it comes). The
// data wait goes on the calling thread's track; so do the others, unless `device_phases` (a
// trainer on a CUDA device, whose phases the device timed): then they go on the track "GPU
// phases", beside the stream tracks whose kernels they contain.
PhaseHook trace_phase_hook(int64_t grad_bytes, bool device_phases = false);

// The recorded events as JSON array members (no brackets), for tests and write_trace.
std::string trace_events_json();

}  // namespace lockstep
