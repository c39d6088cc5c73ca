// The trace recorder's API for device spans (trace.h), without a device: named tracks, spans
// recorded on a track with explicit times, and the flush hooks that write_trace runs, read back
// from the written file. The GPU side (GpuTrace on real streams) is gpu_trace_gpu_test.cpp.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "runtime/base/communicator.h"
#include "runtime/observe/trace.h"
#include "runtime/observe/trace_writer.h"
#include "test_util.h"
#include "trace_events.h"

using namespace lockstep;
using namespace lockstep::testing_util;

namespace {

std::vector<TraceEvent> spans_on(const std::vector<TraceEvent>& events, int tid) {
  std::vector<TraceEvent> out;
  for (const TraceEvent& e : events)
    if (e.ph == "X" && e.tid == tid) out.push_back(e);
  return out;
}

class TraceTracks : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = local_temp_dir("trace-tracks"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

}  // namespace

TEST_F(TraceTracks, NamedTrackHoldsExplicitSpansAndFlushHookRunsOnceAtWrite) {
  auto comm = make_mpi_communicator();
  // Taken before tracing starts, as a communicator does when it is built: the thread that starts
  // tracing must still be track 0, "training".
  const int gpu = trace_track("GPU stream: test");
  start_tracing(*comm);
  EXPECT_EQ(gpu, trace_track("GPU stream: test"));
  const int copy = trace_track("GPU stream: copy");
  EXPECT_NE(gpu, copy);

  int runs = 0;
  const int hook = add_trace_flush_hook([&] {
    ++runs;
    // What a device recorder does at the end: spans it could only resolve now.
    trace_span_on(gpu, "late", "gpu", 0.002, 0.0035, "\"bytes\": 128");
  });
  trace_span_on(gpu, "early", "gpu", 0.0005, 0.001, "\"bytes\": 64");
  trace_span("host", "test", 0.0, 0.004);
  EXPECT_EQ(0, runs) << "a hook ran before write_trace";

  const std::string path = dir_ + "/trace.json";
  write_trace(*comm, path);
  EXPECT_EQ(1, runs);
  remove_trace_flush_hook(hook);

  const auto events = read_trace_events(path);
  EXPECT_EQ(gpu, trace_track_named(events, 0, "GPU stream: test"));
  EXPECT_EQ(copy, trace_track_named(events, 0, "GPU stream: copy"));
  EXPECT_EQ(0, trace_track_named(events, 0, "training"));

  const auto on_gpu = spans_on(events, gpu);
  ASSERT_EQ(2u, on_gpu.size());
  EXPECT_EQ("early", on_gpu[0].name);
  EXPECT_NEAR(500, on_gpu[0].ts, 1e-3);
  EXPECT_NEAR(500, on_gpu[0].dur, 1e-3);
  EXPECT_EQ(64, json_number(on_gpu[0].args, "bytes"));
  EXPECT_EQ("late", on_gpu[1].name);
  EXPECT_NEAR(2000, on_gpu[1].ts, 1e-3);
  EXPECT_NEAR(1500, on_gpu[1].dur, 1e-3);
  EXPECT_EQ(128, json_number(on_gpu[1].args, "bytes"));
  EXPECT_TRUE(spans_on(events, copy).empty());
  const auto on_training = spans_on(events, 0);
  ASSERT_EQ(1u, on_training.size());
  EXPECT_EQ("host", on_training[0].name);
}

TEST_F(TraceTracks, RemovedHookDoesNotRunAndSessionsCountStarts) {
  auto comm = make_mpi_communicator();
  const uint64_t before = trace_session();
  start_tracing(*comm);
  EXPECT_EQ(before + 1, trace_session());
  int kept = 0, removed = 0;
  const int keep = add_trace_flush_hook([&] { ++kept; });
  remove_trace_flush_hook(add_trace_flush_hook([&] { ++removed; }));
  write_trace(*comm, dir_ + "/trace.json");
  EXPECT_EQ(1, kept);
  EXPECT_EQ(0, removed);
  remove_trace_flush_hook(keep);
  start_tracing(*comm);
  EXPECT_EQ(before + 2, trace_session());
  write_trace(*comm, dir_ + "/trace.json");
  EXPECT_EQ(1, kept);
}

TEST_F(TraceTracks, SpansOnATrackNeedTracingOn) {
  auto comm = make_mpi_communicator();
  const int gpu = trace_track("GPU stream: test");
  start_tracing(*comm);
  trace_span_on(gpu, "in time", "gpu", 0.001, 0.002);
  write_trace(*comm, dir_ + "/trace.json");
  // Tracing is off now: a span resolved after the trace was written is not kept.
  trace_span_on(gpu, "too late", "gpu", 0.003, 0.004);
  const std::string recorded = trace_events_json();
  EXPECT_NE(std::string::npos, recorded.find("in time"));
  EXPECT_EQ(std::string::npos, recorded.find("too late"));
}
