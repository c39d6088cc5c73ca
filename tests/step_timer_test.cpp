// Step phases without a device: how a GPU step's marks (host data wait, device event times) become
// the phases of the breakdown and the trace (device_step_phases), the CPU timer's marks as before,
// and the trace phase hook placing late-delivered phases at their own times and, for a device
// trainer, on the "GPU phases" track. The device side (events on a real stream) is in
// train_phases_gpu_test.cpp.
#include "runtime/observe/step_timer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "runtime/observe/trace.h"
#include "runtime/observe/trace_writer.h"
#include "solo_communicator.h"
#include "test_util.h"
#include "trace_events.h"

using namespace lockstep;
using namespace lockstep::testing_util;

namespace {

struct Call {
  Phase phase;
  double begin, end;
};

DeviceStepMarks::Micro micro(double data_begin, double data_end, double f0, double f1, double b1) {
  DeviceStepMarks::Micro u;
  u.data_begin = data_begin;
  u.data_end = data_end;
  u.forward_begin = f0;
  u.forward_end = f1;
  u.backward_end = b1;
  return u;
}

void expect_span(const PhaseSpan& s, Phase phase, double begin, double end) {
  EXPECT_EQ(phase_name(phase), std::string(phase_name(s.phase)));
  EXPECT_DOUBLE_EQ(begin, s.begin) << phase_name(phase);
  EXPECT_DOUBLE_EQ(end, s.end) << phase_name(phase);
}

}  // namespace

TEST(DeviceStepPhases, DeviceTimesBecomeContiguousPhasesWithCommOnlyTheExposedReduction) {
  // The host waits 2 ms for data; the GPU starts 1 ms later (still busy with the previous step),
  // runs forward for 3 ms and backward for 5; the reduction keeps the stream 0.5 ms past the
  // backward pass; norm, decision and update take 1.5 ms.
  DeviceStepMarks m;
  m.micro.push_back(micro(100.000, 100.002, 100.003, 100.006, 100.011));
  m.reduced = 100.0115;
  m.updated = 100.013;
  const std::vector<PhaseSpan> spans = device_step_phases(m);
  ASSERT_EQ(5u, spans.size());
  expect_span(spans[0], Phase::data, 100.000, 100.002);
  expect_span(spans[1], Phase::forward, 100.003, 100.006);
  expect_span(spans[2], Phase::backward, 100.006, 100.011);
  expect_span(spans[3], Phase::comm, 100.011, 100.0115);
  expect_span(spans[4], Phase::optimizer, 100.0115, 100.013);

  StepTimes t;
  std::vector<Call> calls;
  deliver_phases(spans, t, [&](Phase p, double b, double e) { calls.push_back({p, b, e}); });
  EXPECT_NEAR(0.002, t.data, 1e-9);
  EXPECT_NEAR(0.003, t.forward, 1e-9);
  EXPECT_NEAR(0.005, t.backward, 1e-9);
  EXPECT_NEAR(0.0005, t.comm, 1e-9) << "comm is what the reduction added beyond the backward pass";
  EXPECT_NEAR(0.0015, t.optimizer, 1e-9);
  ASSERT_EQ(5u, calls.size());
  for (size_t i = 0; i < spans.size(); ++i) {
    EXPECT_EQ(spans[i].phase, calls[i].phase);
    EXPECT_EQ(spans[i].begin, calls[i].begin);
    EXPECT_EQ(spans[i].end, calls[i].end);
  }
}

TEST(DeviceStepPhases, MicroBatchesEachHaveTheirPhasesAndCommFollowsTheLastBackward) {
  DeviceStepMarks m;
  m.micro.push_back(micro(10.0, 10.1, 10.1, 10.3, 10.6));
  m.micro.push_back(micro(10.2, 10.4, 10.7, 10.8, 11.0));  // data staged while the GPU worked
  m.reduced = 11.25;
  m.updated = 11.3;
  const std::vector<PhaseSpan> s = device_step_phases(m);
  ASSERT_EQ(8u, s.size());
  expect_span(s[0], Phase::data, 10.0, 10.1);
  expect_span(s[1], Phase::forward, 10.1, 10.3);
  expect_span(s[2], Phase::backward, 10.3, 10.6);
  expect_span(s[3], Phase::data, 10.2, 10.4);
  expect_span(s[4], Phase::forward, 10.7, 10.8);
  expect_span(s[5], Phase::backward, 10.8, 11.0);
  expect_span(s[6], Phase::comm, 11.0, 11.25);
  expect_span(s[7], Phase::optimizer, 11.25, 11.3);
}

TEST(DeviceStepPhases, ClockReadingsThatStepBackAreHeldSoNoPhaseIsNegative) {
  // The forward reading lies a microsecond before the host had the data (calibration error), and
  // the update's reading, taken after a recalibration, before the reduction's.
  DeviceStepMarks m;
  m.micro.push_back(micro(5.0, 5.010, 5.009999, 5.020, 5.030));
  m.reduced = 5.031;
  m.updated = 5.030999;
  const std::vector<PhaseSpan> s = device_step_phases(m);
  ASSERT_EQ(5u, s.size());
  expect_span(s[1], Phase::forward, 5.010, 5.020);
  expect_span(s[4], Phase::optimizer, 5.031, 5.031);
  for (const PhaseSpan& p : s) EXPECT_GE(p.end, p.begin) << phase_name(p.phase);
}

TEST(DeviceStepPhases, AStepWithoutDataHasNoPhases) {
  EXPECT_TRUE(device_step_phases(DeviceStepMarks{}).empty());
}

TEST(StepTimer, OnTheCpuEachMarkEndsAPhaseAtOnceAndTheDeviceOnlyMarksDoNothing) {
  StepTimes t;
  std::vector<Call> calls;
  PhaseHook hook = [&](Phase p, double b, double e) { calls.push_back({p, b, e}); };
  StepTimer timer(t, hook, nullptr);
  EXPECT_FALSE(timer.on_device());
  const double start = timer.start_step();
  timer.data_ready();
  timer.forward_begin();
  timer.forward_end();
  timer.backward_progress();
  timer.backward_end();
  EXPECT_EQ(3u, calls.size()) << "data, forward and backward reach the hook as they end";
  timer.reduced();
  const double end = timer.updated();
  timer.collect(true);
  timer.flush();
  ASSERT_EQ(5u, calls.size());
  const Phase order[] = {Phase::data, Phase::forward, Phase::backward, Phase::comm,
                         Phase::optimizer};
  double at = start;
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(order[i], calls[i].phase);
    EXPECT_EQ(at, calls[i].begin) << "phases follow each other without gaps";
    EXPECT_GE(calls[i].end, calls[i].begin);
    at = calls[i].end;
  }
  EXPECT_EQ(end, at);
  EXPECT_NEAR(end - start, t.data + t.forward + t.backward + t.comm + t.optimizer, 1e-12);
}

TEST(TracePhaseHook, LatePhasesLandAtTheirOwnTimesAndDevicePhasesOnTheirTrack) {
  const std::string dir = local_temp_dir("step-timer");
  const std::string path = dir + "/trace.json";
  SoloCommunicator comm;
  start_tracing(comm);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  PhaseHook host = trace_phase_hook(4096);
  PhaseHook device = trace_phase_hook(4096, /*device_phases=*/true);
  // Delivered 20 ms after they happened, as a GPU's phases are once their events complete.
  const double now = steady_seconds();
  const double trace_now = trace_now_seconds();
  host(Phase::forward, now - 0.025, now - 0.020);
  device(Phase::data, now - 0.024, now - 0.023);
  device(Phase::backward, now - 0.022, now - 0.021);
  device(Phase::comm, now - 0.021, now - 0.0205);
  write_trace(comm, path);
  const std::vector<TraceEvent> events = read_trace_events(path);
  std::filesystem::remove_all(dir);

  const int gpu = trace_track_named(events, 0, "GPU phases");
  ASSERT_GE(gpu, 0) << "no track \"GPU phases\"";
  std::vector<TraceEvent> on_thread, on_gpu;
  for (const TraceEvent& e : events) {
    if (e.ph != "X") continue;
    (e.tid == gpu ? on_gpu : on_thread).push_back(e);
  }
  ASSERT_EQ(2u, on_thread.size());
  EXPECT_EQ("forward", on_thread[0].name);
  EXPECT_NEAR((trace_now - 0.025) * 1e6, on_thread[0].ts, 200);
  EXPECT_NEAR(5000, on_thread[0].dur, 1);
  EXPECT_EQ("data wait", on_thread[1].name) << "the host's data wait stays on the thread's track";
  EXPECT_NEAR((trace_now - 0.024) * 1e6, on_thread[1].ts, 200);
  ASSERT_EQ(2u, on_gpu.size());
  EXPECT_EQ("backward", on_gpu[0].name);
  EXPECT_NEAR((trace_now - 0.022) * 1e6, on_gpu[0].ts, 200);
  EXPECT_NEAR(1000, on_gpu[0].dur, 1);
  EXPECT_EQ("all_reduce", on_gpu[1].name);
  EXPECT_EQ(4096, json_number(on_gpu[1].args, "bytes"));
}
