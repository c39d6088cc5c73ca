#include "runtime/observe/trace.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <sstream>
#include <vector>

#include "runtime/base/error.h"
#include "runtime/observe/nvtx.h"

namespace lockstep {

namespace {

struct Event {
  std::string name;
  const char* category;
  double begin, end;  // seconds since start
  int tid;
  std::string args;
};

struct Recorder {
  std::atomic<bool> on{false};
  std::chrono::steady_clock::time_point start;
  int rank = 0;
  std::mutex mutex;
  std::vector<Event> events;
  std::atomic<int> next_tid{0};
  std::vector<std::string> named_tracks;  // track kFirstNamedTrack + i is named_tracks[i]
  std::atomic<uint64_t> session{0};
  // Flush hooks, under their own mutex: a hook records spans, which takes `mutex`.
  std::mutex hook_mutex;
  std::vector<std::pair<int, std::function<void()>>> hooks;
  int next_hook = 0;
};

// Named tracks sit far above the threads' numbers, so a track taken before start_recording (a
// communicator's GPU stream) does not take track 0 from the training thread.
constexpr int kFirstNamedTrack = 1000;

Recorder& recorder() {
  static Recorder r;
  return r;
}

// Small per-thread track numbers in order of first use; start_recording takes 0 for its caller (the
// training thread), so helper threads (collectives, prefetch) come after it.
int thread_track() {
  thread_local int tid = recorder().next_tid.fetch_add(1);
  return tid;
}

// JSON string contents: names are ours, but a model string may carry anything.
std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

void start_recording(int rank) {
  Recorder& r = recorder();
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    r.events.clear();
    r.rank = rank;
  }
  r.session.fetch_add(1);
  thread_track();
  r.start = std::chrono::steady_clock::now();
  r.on.store(true, std::memory_order_release);
}

void stop_recording() { recorder().on.store(false, std::memory_order_release); }

bool tracing() { return recorder().on.load(std::memory_order_relaxed); }

double trace_now_seconds() {
  Recorder& r = recorder();
  if (!r.on.load(std::memory_order_acquire)) return 0;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - r.start).count();
}

void trace_span(const std::string& name, const char* category, double begin, double end,
                const std::string& args) {
  Recorder& r = recorder();
  if (!r.on.load(std::memory_order_acquire)) return;
  const int tid = thread_track();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.events.push_back(Event{name, category, begin, end, tid, args});
}

void trace_span_on(int track, const std::string& name, const char* category, double begin,
                   double end, const std::string& args) {
  Recorder& r = recorder();
  if (!r.on.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(r.mutex);
  r.events.push_back(Event{name, category, begin, end, track, args});
}

int trace_track(const std::string& name) {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (size_t i = 0; i < r.named_tracks.size(); ++i)
    if (r.named_tracks[i] == name) return kFirstNamedTrack + static_cast<int>(i);
  r.named_tracks.push_back(name);
  return kFirstNamedTrack + static_cast<int>(r.named_tracks.size() - 1);
}

uint64_t trace_session() { return recorder().session.load(); }

int add_trace_flush_hook(std::function<void()> hook) {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.hook_mutex);
  r.hooks.emplace_back(r.next_hook, std::move(hook));
  return r.next_hook++;
}

void remove_trace_flush_hook(int id) {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.hook_mutex);
  std::erase_if(r.hooks, [id](const auto& h) { return h.first == id; });
}

void flush_trace() {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.hook_mutex);
  for (auto& h : r.hooks) h.second();
}

TraceSpan::TraceSpan(const char* name, const char* category, int index, int64_t bytes)
    : name_(name), category_(category), index_(index), bytes_(bytes) {
  if (nvtx_enabled()) {
    nvtx_ = true;
    if (index_ >= 0)
      nvtx_push((name_ + std::to_string(index_)).c_str(), category_);
    else
      nvtx_push(name_, category_);
  }
  if (tracing()) begin_ = trace_now_seconds();
}

TraceSpan::~TraceSpan() {
  if (nvtx_) nvtx_pop();
  if (begin_ < 0 || !tracing()) return;
  const double end = trace_now_seconds();
  std::string name = name_;
  if (index_ >= 0) name += std::to_string(index_);
  trace_span(name, category_, begin_, end,
             bytes_ >= 0 ? "\"bytes\": " + std::to_string(bytes_) : std::string());
}

PhaseHook trace_phase_hook(int64_t grad_bytes, bool device_phases) {
  const int track = device_phases ? trace_track("GPU phases") : -1;
  return [grad_bytes, track](Phase phase, double begin, double end) {
    if (!tracing()) return;
    // Both clocks are the steady clock: only their origins differ.
    const double shift = trace_now_seconds() - steady_seconds();
    std::string name = phase_name(phase), args;
    const char* category = phase_name(phase);
    if (phase == Phase::data) {
      trace_span("data wait", "data", begin + shift, end + shift);
      return;
    }
    if (phase == Phase::comm) {
      name = "all_reduce";
      category = "collective";
      args = "\"bytes\": " + std::to_string(grad_bytes) + ", \"op\": \"sum\"";
    }
    if (track >= 0)
      trace_span_on(track, name, category, begin + shift, end + shift, args);
    else
      trace_span(name, category, begin + shift, end + shift, args);
  };
}

std::string trace_events_json() {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::ostringstream os;
  char num[64];
  bool first = true;
  auto sep = [&] {
    if (!first) os << ",\n";
    first = false;
  };
  // Track names, so Perfetto shows "rank 1" rather than "Process 1".
  sep();
  os << "{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": " << r.rank
     << ", \"tid\": 0, \"args\": {\"name\": \"rank " << r.rank << "\"}}";
  sep();
  os << "{\"ph\": \"M\", \"name\": \"process_sort_index\", \"pid\": " << r.rank
     << ", \"tid\": 0, \"args\": {\"sort_index\": " << r.rank << "}}";
  const int tracks = r.next_tid.load();
  for (int t = 0; t < tracks; ++t) {
    sep();
    os << "{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": " << r.rank << ", \"tid\": " << t
       << ", \"args\": {\"name\": \"" << (t == 0 ? "training" : "helper " + std::to_string(t))
       << "\"}}";
  }
  for (size_t i = 0; i < r.named_tracks.size(); ++i) {
    sep();
    os << "{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": " << r.rank
       << ", \"tid\": " << kFirstNamedTrack + static_cast<int>(i) << ", \"args\": {\"name\": \""
       << escape(r.named_tracks[i]) << "\"}}";
  }
  for (const Event& e : r.events) {
    sep();
    os << "{\"ph\": \"X\", \"name\": \"" << escape(e.name) << "\", \"cat\": \"" << e.category
       << "\", \"pid\": " << r.rank << ", \"tid\": " << e.tid;
    std::snprintf(num, sizeof num, ", \"ts\": %.3f, \"dur\": %.3f", e.begin * 1e6,
                  (e.end - e.begin) * 1e6);
    os << num << ", \"args\": {" << e.args << "}}";
  }
  return os.str();
}

}  // namespace lockstep
