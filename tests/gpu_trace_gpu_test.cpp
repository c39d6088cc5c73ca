// --trace on a GPU: spans of work on CUDA streams are timed by the device (GpuTrace) and land, on
// the host's clock, on a track per stream. NCCL collectives (one rank, through the context factory
// the trainer uses) appear on "GPU stream: nccl" with their bytes and dtype, one per call, in
// enqueue order without overlap, inside the host-side window around them; a span around work of
// known length (a host function that sleeps on the stream) lasts that long. Skips, with the
// reason, where no GPU answers or the build has no CUDA.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#if LOCKSTEP_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "gpu_test_util.h"
#include "kernels/cuda/memory.h"
#include "runtime/observe/gpu_trace.h"
#include "runtime/observe/trace.h"
#include "runtime/observe/trace_writer.h"
#include "runtime/process/bootstrap.h"
#include "runtime/process/context.h"
#include "runtime/process/device.h"
#include "test_util.h"
#include "trace_events.h"

using namespace lockstep;
using namespace lockstep::testing_util;
using std::chrono::milliseconds;

namespace {

// The host clock reads a span's ends through a reference event taken within microseconds; 1 ms
// still catches a wrong reference or a unit slip (those are off by far more).
constexpr double kToleranceUs = 1000;
constexpr double kSleepMs = 50;

#if LOCKSTEP_HAVE_CUDA
void CUDART_CB sleep_on_stream(void*) {
  std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(kSleepMs));
}
#endif

// Work of known length on `stream`: the stream is busy for kSleepMs; the host does not wait.
void busy(cudaStream_t stream) {
#if LOCKSTEP_HAVE_CUDA
  if (cudaLaunchHostFunc(stream, sleep_on_stream, nullptr) != cudaSuccess)
    throw std::runtime_error("cudaLaunchHostFunc failed");
#else
  throw std::runtime_error("busy needs the CUDA build");  // unreachable: the fixture skipped
#endif
}

std::vector<TraceEvent> spans_on(const std::vector<TraceEvent>& events, int tid) {
  std::vector<TraceEvent> out;
  for (const TraceEvent& e : events)
    if (e.ph == "X" && e.tid == tid) out.push_back(e);
  return out;
}

// Spans of one stream follow each other: each starts after the previous one ended.
void expect_in_order_without_overlap(const std::vector<TraceEvent>& spans) {
  for (size_t i = 1; i < spans.size(); ++i)
    EXPECT_GE(spans[i].ts, spans[i - 1].ts + spans[i - 1].dur - 2.0)
        << spans[i - 1].name << " and " << spans[i].name << " overlap";
}

class GpuTraceTest : public OnGpu0 {
 protected:
  void SetUp() override {
    OnGpu0::SetUp();
    if (IsSkipped()) return;
    dir_ = local_temp_dir("gpu-trace");
  }
  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  std::string dir_;
};

}  // namespace

TEST_F(GpuTraceTest, NcclCollectivesAndStreamWorkAreDeviceTimedSpans) {
  ContextOptions options;
  options.device = "cuda";
  auto host = make_mpi_communicator();
  Context ctx = make_context(discover_world(), *host, options);
  ASSERT_EQ(Backend::nccl, ctx.grads->backend());
  // Out of place: on one rank NCCL then copies send to recv, work with a length to time (in place
  // it may have nothing to do).
  const std::vector<size_t> counts = {1 << 12, 1 << 16, 1 << 20, 1 << 22, 3000};
  void* send = kernels::cuda_alloc((1 << 22) * sizeof(float));
  void* recv = kernels::cuda_alloc((1 << 22) * sizeof(float));
  void* scratch =
      kernels::cuda_alloc(1 << 20);  // for the stream's own work, apart from the collectives'
  cudaStream_t stream = kernels::cuda_stream_create();
  const std::string path = dir_ + "/trace.json";
  double window_begin = 0, window_end = 0;
  {
    GpuTrace test_track(stream, "GPU stream: test");
    start_tracing(*ctx.host);
    window_begin = trace_now_seconds() * 1e6;
    // Enqueued together, waited for at the end: the spans are resolved partly at later begin()s
    // and partly by write_trace's flush.
    std::vector<WorkHandle> works;
    for (size_t n : counts)
      works.push_back(ctx.grads->all_reduce_async(send, recv, n, DType::f32, ReduceOp::sum));
    test_track.begin("sleep");
    busy(stream);
    test_track.end();
    test_track.begin("zero", 1 << 20);
    kernels::cuda_zero(scratch, 1 << 20, stream);
    test_track.end();
    for (auto& w : works) w->wait(std::chrono::seconds(60));
    kernels::cuda_stream_synchronize(stream);
    window_end = trace_now_seconds() * 1e6;
    write_trace(*ctx.host, path);
  }
  kernels::cuda_stream_destroy(stream);
  kernels::cuda_free(scratch);
  kernels::cuda_free(recv);
  kernels::cuda_free(send);

  const auto events = read_trace_events(path);
  const int nccl = trace_track_named(events, 0, "GPU stream: nccl");
  ASSERT_GE(nccl, 0) << "no track named \"GPU stream: nccl\"";
  const auto collectives = spans_on(events, nccl);
  ASSERT_EQ(counts.size(), collectives.size()) << "one span per all_reduce, and nothing else";
  for (size_t i = 0; i < counts.size(); ++i) {
    SCOPED_TRACE("all_reduce " + std::to_string(i));
    EXPECT_EQ("nccl all_reduce", collectives[i].name);
    EXPECT_EQ(static_cast<double>(counts[i] * sizeof(float)),
              json_number(collectives[i].args, "bytes"));
    EXPECT_EQ("float32", json_string(collectives[i].args, "dtype"));
    EXPECT_GT(collectives[i].dur, 0);
    EXPECT_GE(collectives[i].ts, window_begin - kToleranceUs);
    EXPECT_LE(collectives[i].ts + collectives[i].dur, window_end + kToleranceUs);
  }
  expect_in_order_without_overlap(collectives);

  const int test = trace_track_named(events, 0, "GPU stream: test");
  ASSERT_GE(test, 0);
  const auto own = spans_on(events, test);
  ASSERT_EQ(2u, own.size());
  EXPECT_EQ("sleep", own[0].name);
  EXPECT_GE(own[0].dur, kSleepMs * 1e3 - 10) << "the stream was busy for " << kSleepMs << " ms";
  EXPECT_LE(own[0].dur, kSleepMs * 1e3 + 25e3);
  EXPECT_EQ("zero", own[1].name);
  EXPECT_EQ(1 << 20, json_number(own[1].args, "bytes"));
  EXPECT_GT(own[1].dur, 0);
  expect_in_order_without_overlap(own);
  for (const TraceEvent& e : own) {
    EXPECT_GE(e.ts, window_begin - kToleranceUs) << e.name;
    EXPECT_LE(e.ts + e.dur, window_end + kToleranceUs) << e.name;
  }
}

TEST_F(GpuTraceTest, NothingIsRecordedWhileTracingIsOff) {
  cudaStream_t stream = kernels::cuda_stream_create();
  const std::string path = dir_ + "/trace.json";
  {
    auto comm = make_mpi_communicator();
    GpuTrace off_track(stream, "GPU stream: off");
    off_track.begin("before tracing");
    busy(stream);
    off_track.end();
    kernels::cuda_stream_synchronize(stream);
    start_tracing(*comm);
    write_trace(*comm, path);
  }
  kernels::cuda_stream_destroy(stream);
  const auto events = read_trace_events(path);
  const int off = trace_track_named(events, 0, "GPU stream: off");
  ASSERT_GE(off, 0);
  EXPECT_TRUE(spans_on(events, off).empty());
}
