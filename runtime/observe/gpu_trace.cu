// GpuTrace (gpu_trace.h) for the CUDA build; gpu_trace_stub.cpp stands in for it without CUDA.
//
// A failing CUDA call here never throws into the caller's collective or step: tracing must not
// break a run. The recorder stops instead, and the next flush puts the reason on its track.
#include <cuda_runtime_api.h>

#include <chrono>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "runtime/observe/device_clock.cuh"
#include "runtime/observe/gpu_trace.h"

namespace lockstep {

namespace {

// How long a flush waits for unfinished work before dropping its spans.
constexpr auto kFlushWait = std::chrono::seconds(10);

std::string span_args(int64_t bytes, const char* dtype) {
  std::string args;
  if (bytes >= 0) args = "\"bytes\": " + std::to_string(bytes);
  if (dtype != nullptr) {
    if (!args.empty()) args += ", ";
    args += std::string("\"dtype\": \"") + dtype + "\"";
  }
  return args;
}

}  // namespace

struct GpuTrace::State {
  struct Span {
    std::string name, args;
    const char* category = "gpu";
    cudaEvent_t begin = nullptr, end = nullptr;
    uint64_t session = 0;
  };

  cudaStream_t stream;
  int track;
  int hook = -1;
  std::mutex mutex;
  std::vector<cudaEvent_t> pool;  // recorded and resolved, ready for reuse
  Span open;
  std::deque<Span> pending;  // ended, in stream order, so they complete front first

  DeviceClock clock;         // on trace_now_seconds(), taken in trace session ref_session
  uint64_t ref_session = 0;  // 0: none (sessions count from 1)

  size_t dropped_full = 0;        // not recorded: kMaxPendingSpans were waiting
  size_t dropped_unfinished = 0;  // their work had not finished when a flush gave up waiting
  std::string broken;             // why recording stopped: a CUDA call failed
  bool broken_reported = false;

  bool ok(cudaError_t rc, const char* call) {
    if (rc == cudaSuccess) return true;
    (void)cudaGetLastError();  // ours to consume: later checks elsewhere must not see it
    if (broken.empty())
      broken =
          std::string(call) + " failed: " + cudaGetErrorName(rc) + ": " + cudaGetErrorString(rc);
    return false;
  }

  cudaEvent_t take_event() {
    cudaEvent_t e = nullptr;
    if (!pool.empty()) {
      e = pool.back();
      pool.pop_back();
    } else if (!ok(cudaEventCreate(&e), "cudaEventCreate")) {
      return nullptr;
    }
    return e;
  }

  void give(cudaEvent_t& e) {
    if (e != nullptr) pool.push_back(e);
    e = nullptr;
  }

  // Records `s` (complete) on the track, through the clock reference.
  void record(const Span& s) {
    double begin = 0;
    float length = 0;
    if (!ok(clock.host_seconds(s.begin, &begin), "cudaEventElapsedTime") ||
        !ok(cudaEventElapsedTime(&length, s.begin, s.end), "cudaEventElapsedTime"))
      return;
    trace_span_on(track, s.name, s.category, begin, begin + 1e-3 * length, s.args);
  }

  // Records the pending spans whose work has completed, without waiting; drops those of an
  // earlier session (that trace is written or abandoned). Stops at the first unfinished one.
  void resolve_ready(uint64_t session) {
    while (!pending.empty()) {
      Span& s = pending.front();
      if (s.session == session && broken.empty()) {
        const cudaError_t rc = cudaEventQuery(s.end);
        if (rc == cudaErrorNotReady) return;
        if (ok(rc, "cudaEventQuery")) record(s);
      }
      give(s.begin);
      give(s.end);
      pending.pop_front();
    }
  }

  // Takes a new clock reference for trace session `session`.
  bool calibrate(uint64_t session) {
    if (!ok(clock.calibrate(&trace_now_seconds), "taking the device clock reference")) return false;
    ref_session = session;
    return true;
  }

  // Zero-length markers for what was lost since the last flush, so a reader of the trace knows.
  void report_losses() {
    const double now = trace_now_seconds();
    if (dropped_full > 0)
      trace_span_on(track,
                    std::to_string(dropped_full) + " GPU spans dropped (more than " +
                        std::to_string(kMaxPendingSpans) + " waiting)",
                    "gpu", now, now);
    if (dropped_unfinished > 0)
      trace_span_on(track,
                    std::to_string(dropped_unfinished) +
                        " GPU spans dropped (their work had not finished at the trace's end)",
                    "gpu", now, now);
    if (!broken.empty() && !broken_reported)
      trace_span_on(track, "GPU spans stopped: " + broken, "gpu", now, now);
    broken_reported = broken_reported || !broken.empty();
    dropped_full = dropped_unfinished = 0;
  }
};

GpuTrace::GpuTrace(cudaStream_t stream, const std::string& track_name)
    : state_(std::make_unique<State>()) {
  state_->stream = stream;
  state_->track = trace_track(track_name);
  state_->hook = add_trace_flush_hook([this] { flush(); });
}

GpuTrace::~GpuTrace() {
  remove_trace_flush_hook(state_->hook);
  State& st = *state_;
  std::lock_guard<std::mutex> lock(st.mutex);
  if (tracing()) st.resolve_ready(trace_session());
  // Destroying an event whose work is still queued is allowed: CUDA frees it once it completes.
  for (State::Span& s : st.pending) {
    st.give(s.begin);
    st.give(s.end);
  }
  st.give(st.open.begin);
  for (cudaEvent_t e : st.pool) (void)cudaEventDestroy(e);
}

void GpuTrace::begin_traced(const char* name, int64_t bytes, const char* dtype,
                            const char* category, int index) {
  State& st = *state_;
  std::lock_guard<std::mutex> lock(st.mutex);
  if (open_) st.give(st.open.begin);  // its end() never came
  open_ = false;
  const uint64_t session = trace_session();
  st.resolve_ready(session);
  if (!st.broken.empty()) return;
  // Recalibrate only with nothing in flight: every span then lies after its reference.
  const bool stale = st.pending.empty() && st.clock.stale(trace_now_seconds());
  if ((st.ref_session != session || stale) && !st.calibrate(session)) return;
  if (st.pending.size() >= kMaxPendingSpans) {
    ++st.dropped_full;
    return;
  }
  cudaEvent_t e = st.take_event();
  if (e == nullptr) return;
  if (!st.ok(cudaEventRecord(e, st.stream), "cudaEventRecord")) {
    st.give(e);
    return;
  }
  std::string full = name;
  if (index >= 0) full += std::to_string(index);
  st.open = State::Span{std::move(full), span_args(bytes, dtype), category, e, nullptr, session};
  open_ = true;
}

void GpuTrace::end_traced() {
  State& st = *state_;
  std::lock_guard<std::mutex> lock(st.mutex);
  open_ = false;
  cudaEvent_t e = st.take_event();
  if (e == nullptr || !st.ok(cudaEventRecord(e, st.stream), "cudaEventRecord")) {
    st.give(e);
    st.give(st.open.begin);
    return;
  }
  st.open.end = e;
  st.pending.push_back(std::move(st.open));
  st.open = State::Span{};
}

void GpuTrace::flush() {
  State& st = *state_;
  std::lock_guard<std::mutex> lock(st.mutex);
  const uint64_t session = trace_session();
  const auto deadline = std::chrono::steady_clock::now() + kFlushWait;
  for (;;) {
    st.resolve_ready(session);
    if (st.pending.empty()) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      st.dropped_unfinished += st.pending.size();
      for (State::Span& s : st.pending) {
        st.give(s.begin);
        st.give(s.end);
      }
      st.pending.clear();
      break;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  st.report_losses();
}

}  // namespace lockstep
