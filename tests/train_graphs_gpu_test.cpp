// Training steps captured in CUDA graphs (DESIGN.md decision 18) against the same training run
// uncaptured (--cuda-graphs off): with the convolutions pinned to one kernel family
// (LOCKSTEP_CUDA_CONV=im2col, so both runs take the same kernels), the parameters, the optimizer's
// step count, every epoch's training loss and the test scores are bit for bit the same, in fp32
// and bf16, over NCCL (one rank: its all-reduces are part of the graph) and over a one-rank host
// communicator (no collective in the graph). The run crosses epochs whose last batch is partial
// (run uncaptured), evaluates after each, follows a warm-up and cosine learning-rate schedule
// (the graph's update reads each step's rate from device memory), clips, and reduces a bucket per
// layer. Steps whose loss is not finite are skipped by the graph as the host skips them
// uncaptured (--on-nan skip). With every kernel family allowed, the captured run stays within the
// summation-order tolerance of the uncaptured one. A model with a layer that a graph cannot record
// (it reads from the device synchronously) trains uncaptured, with the bits of --cuda-graphs off:
// the failed capture is discarded and the step runs again. A bf16 GPT with its logits in bf16
// (LOCKSTEP_CUDA_LOGITS=bf16) gives the same bits captured and uncaptured, with evaluations (fp32
// logits) between its epochs, and losses near those of fp32 logits; so does a CNN whose first
// layer runs fused with its max-pool (LOCKSTEP_CUDA_CONV_POOL=fused), near the unfused layers'.
// A bf16 run's weight copy written by the update gives the bits of each layer casting its own at
// every forward (LOCKSTEP_CUDA_BF16_WEIGHTS).
// Skips, with the reason, where no GPU answers.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "data_fixtures.h"
#include "gpu_test_util.h"
#include "kernels/activation.h"
#include "kernels/cuda/memory.h"
#include "kernels/cuda/stream.h"
#include "runtime/base/communicator.h"
#include "runtime/base/knobs.h"
#include "runtime/model/layer_registry.h"
#include "runtime/train/trainer.h"
#include "test_util.h"
#include "train_fixtures.h"

using namespace lockstep;
using namespace lockstep::testing_util;

namespace {

// 72 training images: four full steps of 16 and a partial one of 8 per epoch; 16 test images.
std::string write_images() {
  StripedImages s;
  s.train_rows = 72;
  return write_striped_images(local_temp_dir("train_graphs_gpu") + "/images.h5", s);
}

TrainConfig config(const std::string& data, Precision precision, bool graphs) {
  TrainConfig c;
  c.train.path = data;
  c.model = "conv3x3:8,relu,maxpool2,flatten,dense:16,relu,dense";
  c.optimizer.kind = OptimizerKind::adam;
  c.lr = 3e-3;
  c.lr_schedule = LrScheduleKind::cosine;
  c.warmup_steps = 3;
  c.min_lr = 1e-4;
  c.global_batch = 16;
  c.epochs = 3;
  c.bucket_mb = 1e-6;  // a bucket per layer: several all-reduces inside the graph
  c.clip_norm = 0.5;
  c.seed = 11;
  c.print = false;
  c.device = DeviceKind::cuda;
  c.precision = precision;
  c.cuda_graphs = graphs;
  return c;
}

// "hostrelu": a ReLU whose CUDA twin also reads one value of its output back to the host at each
// forward, as a careless custom layer might: a synchronous copy, which a stream capture cannot
// record.
class HostReadRelu : public Layer {
 public:
  HostReadRelu(const LayerPlan& plan, cudaStream_t stream) : Layer(plan), stream_(stream) {}
  void forward(int batch, const float* x, float* y, float*) override {
    kernels::relu_forward_cuda(x, y, static_cast<size_t>(batch) * out_size(), stream_);
    float first = 0;
    kernels::cuda_copy_to_host(&first, y, sizeof first);
  }
  void backward(int batch, const float*, const float* y, const float* dy, float* dx,
                float*) override {
    if (dx)
      kernels::relu_backward_cuda(y, dy, dx, static_cast<size_t>(batch) * out_size(), stream_);
  }

 private:
  cudaStream_t stream_;
};

void register_host_read_relu() {
  static const bool once = [] {
    LayerType t;
    t.name = "hostrelu";
    t.parse = [](const LayerToken& tok) {
      tok.expect_args(0, 0);
      return std::vector<int>{};
    };
    t.format = [](const LayerSpec&) { return std::string("hostrelu"); };
    t.plan = [](LayerPlan& p, const LayerCheck&) { p.out = p.in; };
    t.make_cpu = [](const LayerPlan&, CpuKernels) -> std::unique_ptr<Layer> {
      throw std::logic_error("hostrelu is a GPU test's layer");
    };
    t.make_cuda = [](const LayerPlan& p,
                     const CudaLayerPlacement& where) -> std::unique_ptr<Layer> {
      return std::make_unique<HostReadRelu>(p, where.stream);
    };
    register_layer(t);
    return true;
  }();
  (void)once;
}

class TrainGraphsGpu : public OnGpu0 {
 protected:
  void SetUp() override {
    OnGpu0::SetUp();
    if (IsSkipped()) return;
    saved_ = configured_knobs();
  }
  void TearDown() override { configure_knobs(saved_); }
  // LOCKSTEP_CUDA_CONV for the trainers the test builds next (knobs.h).
  void cuda_conv(CudaConvKnob families) {
    Knobs k = saved_;
    k.cuda_conv = families;
    configure_knobs(k);
  }
  Knobs saved_;
};

}  // namespace

TEST_F(TrainGraphsGpu, CapturedStepsGiveTheBitsOfUncapturedSteps) {
  cuda_conv(CudaConvKnob::im2col);
  auto nccl = make_nccl_communicator(0, std::chrono::seconds(120));
  auto mpi = make_mpi_communicator();
  const std::string data = write_images();
  for (Precision p : {Precision::fp32, Precision::bf16}) {
    for (Communicator* grads : {nccl.get(), mpi.get()}) {
      SCOPED_TRACE(std::string(precision_name(p)) + ", gradients over " +
                   backend_name(grads->backend()));
      const Trained want = train(*mpi, *grads, config(data, p, false));
      const Trained got = train(*mpi, *grads, config(data, p, true));
      EXPECT_EQ(0, want.captured) << "--cuda-graphs off captures nothing";
      // 3 epochs of 4 full steps, the first 2 run uncaptured before the first capture.
      EXPECT_EQ(10, got.captured) << "every full step after the warm-up is a graph's";
      EXPECT_EQ(15, got.updates);
      expect_same_bits(got, want);
      std::printf("%s over %s: %lld of %lld steps captured, test loss %.6f (uncaptured %.6f)\n",
                  precision_name(p), backend_name(grads->backend()),
                  static_cast<long long>(got.captured),
                  static_cast<long long>(got.result.times.steps), got.result.test.loss,
                  want.result.test.loss);
    }
  }
}

// --eval-every 1: an evaluation after every step, while the next step's batch is staged in one
// input slot (the evaluation's uploads take the other) and the graphs of both slots stand; the
// training is the same bits as without, and every full step after the warm-up is still a graph's.
TEST_F(TrainGraphsGpu, EvaluatingBetweenCapturedStepsChangesNoBits) {
  cuda_conv(CudaConvKnob::im2col);
  auto mpi = make_mpi_communicator();
  const std::string data = write_images();
  for (Precision p : {Precision::fp32, Precision::bf16}) {
    SCOPED_TRACE(precision_name(p));
    const Trained want = train(*mpi, *mpi, config(data, p, true));
    TrainConfig c = config(data, p, true);
    c.eval_every = 1;
    const Trained got = train(*mpi, *mpi, c);
    EXPECT_EQ(10, got.captured);
    EXPECT_EQ(15, got.updates);
    expect_same_bits(got, want);
  }
}

// The trainer's bf16-logit path end to end (Step::loss_bf16, the head reading a bf16 dlogits):
// captured and uncaptured steps agree bit for bit, evaluating with fp32 logits between epochs does
// not disturb the graphs that replay bf16 ones, and the losses stay near fp32 logits' (bf16
// rounding of the logits, not a wrong gradient, which would move them far).
TEST_F(TrainGraphsGpu, Bf16LogitsGiveTheSameBitsCapturedAndNearFp32Logits) {
  const std::string dir = local_temp_dir("train_graphs_gpu_gpt");
  const std::string data = dir + "/tokens.h5";
  write_tokens<uint8_t>(data, 72, 16, 256, "train");
  write_tokens<uint8_t>(data, 16, 16, 256, "test");
  auto mpi = make_mpi_communicator();
  auto gpt = [&](bool graphs) {
    TrainConfig c = config(data, Precision::bf16, graphs);
    c.model = "gpt:layers=1,heads=2,dim=32,ctx=16";
    c.optimizer.kind = OptimizerKind::adamw;
    c.lr = 1e-2;
    return c;
  };
  Knobs k = saved_;
  k.cuda_logits = LogitsKnob::f32;
  configure_knobs(k);
  const Trained fp32_logits = train(*mpi, *mpi, gpt(true));
  k.cuda_logits = LogitsKnob::bf16;
  configure_knobs(k);
  const Trained want = train(*mpi, *mpi, gpt(false));
  const Trained got = train(*mpi, *mpi, gpt(true));
  EXPECT_EQ(10, got.captured) << "every full step after the warm-up is a graph's";
  expect_same_bits(got, want);
  ASSERT_EQ(got.result.epochs.size(), fp32_logits.result.epochs.size());
  for (size_t e = 0; e < got.result.epochs.size(); ++e) {
    const double a = got.result.epochs[e].train_loss, b = fp32_logits.result.epochs[e].train_loss;
    EXPECT_NEAR(a, b, 0.03 * b) << "epoch " << e + 1 << "'s training loss";
  }
  EXPECT_LT(got.result.epochs.back().train_loss, got.result.epochs.front().train_loss)
      << "it learns";
  std::filesystem::remove_all(dir);
}

// LOCKSTEP_CUDA_CONV_POOL=fused: the first convolution, the max-pool and the ReLU after it as one
// layer on the fused kernels (plan_cuda). Captured and uncaptured steps give the same bits in fp32
// and bf16; the training and test losses stay near those of the unfused layers (im2col), which sum
// in another order; and the model learns.
TEST_F(TrainGraphsGpu, FusedFirstLayerGivesTheSameBitsCapturedAndNearTheUnfusedLayers) {
  auto mpi = make_mpi_communicator();
  const std::string data = write_images();
  for (Precision p : {Precision::fp32, Precision::bf16}) {
    SCOPED_TRACE(precision_name(p));
    auto cnn = [&](bool graphs) {
      TrainConfig c = config(data, p, graphs);
      c.model = "conv3x3:16,relu,maxpool2,flatten,dense:16,relu,dense";
      return c;
    };
    Knobs k = saved_;
    k.cuda_conv = CudaConvKnob::im2col;
    configure_knobs(k);
    const Trained unfused = train(*mpi, *mpi, cnn(true));
    k.cuda_conv_pool = ConvPoolKnob::fused;
    configure_knobs(k);
    const Trained want = train(*mpi, *mpi, cnn(false));
    const Trained got = train(*mpi, *mpi, cnn(true));
    EXPECT_EQ(10, got.captured) << "every full step after the warm-up is a graph's";
    expect_same_bits(got, want);
    ASSERT_EQ(got.result.epochs.size(), unfused.result.epochs.size());
    for (size_t e = 0; e < got.result.epochs.size(); ++e) {
      const double a = got.result.epochs[e].train_loss, b = unfused.result.epochs[e].train_loss;
      EXPECT_NEAR(a, b, 0.02 * b) << "epoch " << e + 1 << "'s training loss";
    }
    EXPECT_NEAR(got.result.test.loss, unfused.result.test.loss, 0.02 * unfused.result.test.loss);
    EXPECT_LT(got.result.epochs.back().train_loss, got.result.epochs.front().train_loss)
        << "it learns";
    std::printf("%s fused first layer: test loss %.6f (unfused %.6f)\n", precision_name(p),
                got.result.test.loss, unfused.result.test.loss);
  }
}

// LOCKSTEP_CUDA_BF16_WEIGHTS: a bf16 run's one weight copy, written by the optimizer's update
// (update, the default: ModelPlacement::bf16_params), against each layer casting its weights at
// every forward (forward): the same bits, for the CNN (its im2col convolution and dense layers read
// the copy where their words lie on 256 bytes, and cast their own where not: both kinds here) and
// the GPT (its blocks, the tied head, the GELU epilogue's bias: at 128 channels every weight's
// words lie on 256 bytes in the copy, at 64 some do not), captured and uncaptured, with an
// evaluation after every step, with two micro-batches a step (uncaptured: the copy read twice
// between updates) and recomputed blocks, and with bf16 logits.
TEST_F(TrainGraphsGpu, Bf16WeightsWrittenByTheUpdateGiveTheBitsOfCastsAtEveryForward) {
  auto mpi = make_mpi_communicator();
  const std::string images = write_images();
  const std::string dir = local_temp_dir("train_graphs_gpu_w16");
  const std::string tokens = dir + "/tokens.h5";
  write_tokens<uint8_t>(tokens, 72, 16, 256, "train");
  write_tokens<uint8_t>(tokens, 16, 16, 256, "test");
  struct Case {
    const char* name;
    const char* gpt;  // the GPT's spec, or null for the CNN
    GeluKnob gelu;
    LogitsKnob logits;
    bool graphs;
    int grad_accum;
    Recompute recompute;
  };
  const char* wide = "gpt:layers=1,heads=2,dim=128,ctx=16";
  // 64 channels: some of a block's weights lie off 256 bytes in the copy (their own copies then).
  const char* narrow = "gpt:layers=2,heads=2,dim=64,ctx=16";
  const GeluKnob kernel = GeluKnob::kernel;
  const LogitsKnob f32 = LogitsKnob::f32;
  const Case cases[] = {
      {"cnn, captured", nullptr, kernel, f32, true, 1, Recompute::none},
      {"cnn, 2 micro-batches", nullptr, kernel, f32, false, 2, Recompute::none},
      {"gpt, GELU epilogue, captured", wide, GeluKnob::epilogue, f32, true, 1, Recompute::none},
      {"gpt, 2 micro-batches, recomputed blocks", wide, kernel, f32, false, 2, Recompute::blocks},
      {"gpt of 64 channels, bf16 logits, captured", narrow, kernel, LogitsKnob::bf16, true, 1,
       Recompute::none}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TrainConfig tc = config(c.gpt ? tokens : images, Precision::bf16, c.graphs);
    if (c.gpt) {
      tc.model = c.gpt;
      tc.optimizer.kind = OptimizerKind::adamw;
    }
    tc.grad_accum = c.grad_accum;
    tc.recompute = c.recompute;
    tc.eval_every = 1;
    Knobs k = saved_;
    k.cuda_conv = CudaConvKnob::im2col;
    k.cuda_gelu = c.gelu;
    k.cuda_logits = c.logits;
    k.cuda_bf16_weights = Bf16WeightsKnob::forward;
    configure_knobs(k);
    {
      Trainer t(*mpi, *mpi, tc);
      EXPECT_EQ(nullptr, t.model().params16()) << "each layer casts its own copy";
    }
    const Trained want = train(*mpi, *mpi, tc);
    k.cuda_bf16_weights = Bf16WeightsKnob::update;
    configure_knobs(k);
    {
      Trainer t(*mpi, *mpi, tc);
      EXPECT_NE(nullptr, t.model().params16()) << "the model keeps the copy";
    }
    const Trained got = train(*mpi, *mpi, tc);
    EXPECT_EQ(got.captured, want.captured);
    if (c.graphs) {
      EXPECT_EQ(10, got.captured) << "every full step after the warm-up is a graph's";
    }
    expect_same_bits(got, want);
    EXPECT_LT(got.result.epochs.back().train_loss, got.result.epochs.front().train_loss)
        << "it learns";
  }
  std::filesystem::remove_all(dir);
}

TEST_F(TrainGraphsGpu, NonFiniteStepsAreSkippedByTheGraphAsWithout) {
  cuda_conv(CudaConvKnob::im2col);
  auto mpi = make_mpi_communicator();
  const std::string data = write_images();
  TrainConfig c = config(data, Precision::fp32, false);
  c.optimizer.kind = OptimizerKind::sgd;  // a huge rate: the loss overflows after a few steps
  c.lr = 1e30;
  c.lr_schedule = LrScheduleKind::constant;
  c.warmup_steps = 0;
  c.clip_norm = 0;
  c.guard.on_nan = NanPolicy::skip;
  const Trained want = train(*mpi, *mpi, c);
  c.cuda_graphs = true;
  const Trained got = train(*mpi, *mpi, c);
  ASSERT_GT(want.skipped, 0) << "the rate was meant to make the loss overflow";
  EXPECT_GT(got.captured, 0);
  EXPECT_EQ(got.skipped, want.skipped);
  EXPECT_EQ(got.updates, want.updates);
  EXPECT_EQ(0u, differing(got.params, want.params))
      << "a skipped step must leave the parameters as they were";
  std::printf("%lld of 15 steps skipped (uncaptured: %lld), %lld captured\n",
              static_cast<long long>(got.skipped), static_cast<long long>(want.skipped),
              static_cast<long long>(got.captured));
}

TEST_F(TrainGraphsGpu, WithEveryKernelFamilyCapturedStepsStayWithinRounding) {
  cuda_conv(CudaConvKnob::any);  // cuDNN, im2col and the direct kernels, timed per layer
  auto nccl = make_nccl_communicator(0, std::chrono::seconds(120));
  auto mpi = make_mpi_communicator();
  const std::string data = write_images();
  const Trained want = train(*mpi, *nccl, config(data, Precision::fp32, false));
  const Trained got = train(*mpi, *nccl, config(data, Precision::fp32, true));
  EXPECT_EQ(10, got.captured);
  EXPECT_EQ(got.updates, want.updates);
  const double rel = relative_difference(got.params, want.params);
  std::printf("every kernel family: captured vs uncaptured relative L2 difference %.3g\n", rel);
  EXPECT_LT(rel, 1e-4) << "two runs may time different kernel families: rounding only";
}

TEST_F(TrainGraphsGpu, AStepAGraphCannotRecordRunsUncapturedWithTheSameBits) {
  cuda_conv(CudaConvKnob::im2col);
  register_host_read_relu();
  auto nccl = make_nccl_communicator(0, std::chrono::seconds(120));
  auto mpi = make_mpi_communicator();
  const std::string data = write_images();
  TrainConfig c = config(data, Precision::fp32, false);
  c.model = "conv3x3:8,hostrelu,maxpool2,flatten,dense:16,relu,dense";
  const Trained want = train(*mpi, *nccl, c);
  c.cuda_graphs = true;
  const Trained got = train(*mpi, *nccl, c);
  EXPECT_EQ(0, got.captured) << "the capture failed: every step ran uncaptured";
  EXPECT_EQ(15, got.updates);
  expect_same_bits(got, want);
}
