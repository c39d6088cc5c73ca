// Where a GPU training step's time goes, as the device measured it: the trainer's phases come
// from CUDA events on the compute stream, so the forward and backward passes hold the GPU's
// compute (not the host's enqueueing) and comm only what the reduction added beyond it; every
// step's phases reach the hook once, in order, by the end of run(). Under --trace the compute
// stream's track holds each layer's forward and backward kernels (named as on the CPU: "conv0",
// "dense6"), the loss, the gradient norm and the update, in stream order and inside their step's
// device phases on "GPU phases"; the copy stream's track holds each batch's copy, with its bytes,
// finished before its forward pass began. Skips, with the reason, where no GPU answers.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "runtime/base/communicator.h"
#include "runtime/model/layer_registry.h"
#include "runtime/observe/trace.h"
#include "runtime/observe/trace_writer.h"
#include "runtime/train/trainer.h"
#include "test_util.h"
#include "trace_events.h"
#include "train_fixtures.h"

using namespace lockstep;
using namespace lockstep::testing_util;

namespace {

// Two clock references (the phases' and the stream spans') each within microseconds of the host
// clock; 50 us still catches a span outside its phase by a kernel's length.
constexpr double kToleranceUs = 50;

struct Call {
  Phase phase;
  double begin, end;
};

class TrainPhasesGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string why = gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
    dir_ = local_temp_dir("train-phases-gpu");
    StripedImages s;
    s.side = 28;
    s.classes = 10;
    s.train_rows = 1024;
    s.test_rows = 16;
    data_ = write_striped_images(dir_ + "/images.h5", s);
  }
  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  TrainConfig config(int64_t steps) const {
    TrainConfig c;
    c.train.path = data_;
    c.model = "conv3x3:32,relu,maxpool2,conv3x3:64,relu,maxpool2,flatten,dense";
    c.global_batch = 256;
    c.steps = steps;
    c.eval_every_epoch = false;
    c.print = false;
    c.device = DeviceKind::cuda;
    return c;
  }
  std::string dir_, data_;
};

std::vector<TraceEvent> spans_on(const std::vector<TraceEvent>& events, int tid) {
  std::vector<TraceEvent> out;
  for (const TraceEvent& e : events)
    if (e.ph == "X" && e.tid == tid) out.push_back(e);
  return out;
}

void expect_inside(const TraceEvent& inner, const TraceEvent& outer, const std::string& what) {
  EXPECT_GE(inner.ts, outer.ts - kToleranceUs) << inner.name << " begins before " << what;
  EXPECT_LE(inner.ts + inner.dur, outer.ts + outer.dur + kToleranceUs)
      << inner.name << " ends after " << what;
}

}  // namespace

TEST_F(TrainPhasesGpu, ForwardAndBackwardHoldTheDeviceComputeAndEveryStepArrivesInOrder) {
  auto comm = make_mpi_communicator();
  const int64_t steps = 8;
  Trainer t(*comm, config(steps));
  std::vector<Call> calls;
  t.set_phase_hook([&](Phase p, double b, double e) { calls.push_back({p, b, e}); });
  const TrainResult r = t.run();

  ASSERT_EQ(static_cast<size_t>(5 * steps), calls.size()) << "five phases per step, each once";
  const Phase order[] = {Phase::data, Phase::forward, Phase::backward, Phase::comm,
                         Phase::optimizer};
  for (int64_t s = 0; s < steps; ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    const Call* c = &calls[static_cast<size_t>(5 * s)];
    for (int i = 0; i < 5; ++i) {
      EXPECT_EQ(order[i], c[i].phase);
      EXPECT_GE(c[i].end, c[i].begin);
    }
    // The device phases follow each other on the stream, after the host had the data.
    EXPECT_GE(c[1].begin, c[0].end);
    for (int i = 2; i < 5; ++i) EXPECT_EQ(c[i].begin, c[i - 1].end);
    if (s > 0) {  // after the step before, within the clock references' error
      EXPECT_GE(c[1].begin, calls[static_cast<size_t>(5 * s - 1)].end - kToleranceUs * 1e-6);
    }
  }
  const StepTimes& w = r.times;
  EXPECT_GT(w.forward, 0);
  EXPECT_GT(w.backward, 0);
  EXPECT_GT((w.forward + w.backward) / w.total, 0) << "the breakdown's forward+backward share";
  // One rank: the reduction is a copy down and up of 50k gradients, far less than the convolutions
  // of 256 images. Timed on the host, this compute would have landed in comm.
  EXPECT_GT(w.forward + w.backward, w.comm)
      << "forward " << w.forward << " s, backward " << w.backward << " s, comm " << w.comm << " s";
  EXPECT_LT(w.forward + w.backward, w.total);
  std::printf(
      "%lld steps: total %.3f ms, data %.3f, forward %.3f, backward %.3f, comm %.3f, "
      "optimizer %.3f\n",
      static_cast<long long>(steps), w.total * 1e3, w.data * 1e3, w.forward * 1e3, w.backward * 1e3,
      w.comm * 1e3, w.optimizer * 1e3);
}

TEST_F(TrainPhasesGpu, TraceHasEachLayersKernelsOnTheComputeStreamAndEachCopyOnTheCopyStream) {
  auto comm = make_mpi_communicator();
  const int64_t steps = 3;
  const std::string path = dir_ + "/trace.json";
  std::vector<std::string> forward_names;
  size_t copy_bytes = 0;
  {
    Trainer t(*comm, config(steps));
    for (size_t i = 0; i < t.model().plan().size(); ++i) {
      const LayerType& type = find_layer_type(t.model().plan()[i].spec.type);
      if (type.name != "flatten") forward_names.push_back(type.span() + std::to_string(i));
    }
    const size_t rows = 256;                                           // one rank, no accumulation
    copy_bytes = rows * (t.model().input_size() + 2) * sizeof(float);  // images, labels, mask
    start_tracing(*comm);
    t.set_phase_hook(trace_phase_hook(static_cast<int64_t>(t.model().param_count() * sizeof(float)),
                                      /*device_phases=*/true));
    t.run();
    write_trace(*comm, path);
  }
  const std::vector<TraceEvent> events = read_trace_events(path);
  const int compute = trace_track_named(events, 0, "GPU stream: compute");
  const int copy = trace_track_named(events, 0, "GPU stream: copy");
  const int phases = trace_track_named(events, 0, "GPU phases");
  ASSERT_GE(compute, 0) << "no track \"GPU stream: compute\"";
  ASSERT_GE(copy, 0) << "no track \"GPU stream: copy\"";
  ASSERT_GE(phases, 0) << "no track \"GPU phases\"";

  // Per step, in stream order: forward layers, loss, backward layers (reversed), norm, update.
  std::vector<std::string> step_names = forward_names;
  step_names.push_back("loss");
  for (size_t i = forward_names.size(); i-- > 0;) step_names.push_back(forward_names[i]);
  step_names.push_back("gradient norm");
  step_names.push_back("optimizer update");
  const std::vector<TraceEvent> kernels = spans_on(events, compute);
  const std::vector<TraceEvent> phase_spans = spans_on(events, phases);
  const std::vector<TraceEvent> copies = spans_on(events, copy);
  ASSERT_GE(kernels.size(), steps * step_names.size()) << "the final evaluation adds forwards";
  ASSERT_EQ(static_cast<size_t>(4 * steps), phase_spans.size());
  ASSERT_GE(copies.size(), static_cast<size_t>(steps));
  for (int64_t s = 0; s < steps; ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    const TraceEvent* ph = &phase_spans[static_cast<size_t>(4 * s)];
    ASSERT_EQ("forward", ph[0].name);
    ASSERT_EQ("backward", ph[1].name);
    ASSERT_EQ("all_reduce", ph[2].name);
    ASSERT_EQ("optimizer", ph[3].name);
    const TraceEvent* k = &kernels[static_cast<size_t>(s) * step_names.size()];
    for (size_t i = 0; i < step_names.size(); ++i) {
      EXPECT_EQ(step_names[i], k[i].name) << "span " << i << " of the step";
      if (i > 0) {
        EXPECT_GE(k[i].ts, k[i - 1].ts + k[i - 1].dur - 2.0) << "in stream order";
      }
      const bool forward = i <= forward_names.size();
      const bool backward = !forward && i <= 2 * forward_names.size();
      EXPECT_EQ(forward ? "forward" : backward ? "backward" : "optimizer", k[i].cat) << k[i].name;
      expect_inside(k[i],
                    forward    ? ph[0]
                    : backward ? ph[1]
                               : ph[3],
                    forward    ? "the step's forward phase"
                    : backward ? "its backward phase"
                               : "its optimizer phase");
    }
    EXPECT_EQ("batch copy", copies[static_cast<size_t>(s)].name);
    EXPECT_EQ(static_cast<double>(copy_bytes),
              json_number(copies[static_cast<size_t>(s)].args, "bytes"));
    EXPECT_LE(copies[static_cast<size_t>(s)].ts + copies[static_cast<size_t>(s)].dur,
              ph[0].ts + kToleranceUs)
        << "the forward pass waits for its batch";
  }
}
