// Model over flat buffers: back-propagation through every layer kind matches finite differences of
// the loss, gradients accumulate across micro-batches (what gradient accumulation and data
// parallelism rely on), the named tensors cover every parameter with each layer's range aligned to
// 256 bytes and zeros between the ranges, and initialisation is a function of the seed alone.
#include "runtime/model/model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "kernels/activation.h"
#include "kernels/conv/conv2d.h"
#include "kernels/conv/conv_pool.h"
#include "kernels/conv/pool.h"
#include "kernels/conv/winograd.h"
#include "kernels/dense.h"
#include "kernels/onednn/onednn.h"
#include "kernels/step/loss.h"
#include "runtime/base/error.h"
#include "runtime/model/cpu_plan.h"
#include "runtime/model/layers/conv.h"

using namespace lockstep;

namespace {

constexpr int kBatch = 4, kOutputs = 3;
const SampleShape kInput = {6, 6, 2};
const char* kSpec = "conv3x3:3,relu,maxpool2,flatten,dense:5,relu,dense";

std::vector<float> random_vector(size_t n, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::vector<float> v(n);
  fill_uniform(v.data(), n, 1.0f, gen);
  return v;
}

// The summed MSE of the model on (x, t); with grads, also back-propagates it into the model.
double loss(Model& m, const std::vector<float>& x, const std::vector<float>& t, int batch,
            bool grads, int offset = 0) {
  const float* out = m.forward(x.data() + offset * m.input_size(), batch);
  kernels::LossTotals r = kernels::mse_cpu(out, t.data() + offset * kOutputs, nullptr, batch,
                                           kOutputs, 1.0f, grads ? m.output_grad() : nullptr);
  if (grads) m.backward(batch);
  return r.loss_sum;
}

// The relative L2 error of the model's gradient of loss() on (x, t) against central differences
// over every parameter. Small steps: a larger one can carry a ReLU input across zero (seen at 1e-3
// for one hidden unit), where the loss has a kink and finite differences stop being the
// derivative.
double gradient_error(Model& m, const std::vector<float>& x, const std::vector<float>& t) {
  m.zero_grads();
  loss(m, x, t, kBatch, true);
  std::vector<float> analytic(m.grads(), m.grads() + m.param_count());
  double diff = 0, norm = 0;
  const float eps = 1e-4f;
  for (size_t i = 0; i < m.param_count(); ++i) {
    const float keep = m.params()[i];
    m.params()[i] = keep + eps;
    const double up = loss(m, x, t, kBatch, false);
    m.params()[i] = keep - eps;
    const double down = loss(m, x, t, kBatch, false);
    m.params()[i] = keep;
    const double numeric = (up - down) / (2.0 * eps);
    diff += (numeric - analytic[i]) * (numeric - analytic[i]);
    norm += numeric * numeric;
  }
  EXPECT_GT(norm, 0.0);
  return std::sqrt(diff / norm);
}

// The model's first layer, a 3x3 convolution to 3 channels over kInput, then a ReLU, computed
// with the CPU kernels from the model's first two tensors (weight, bias).
std::vector<float> conv_relu_reference(const Model& m, const std::vector<float>& x) {
  kernels::Conv2dShape cs;
  cs.n = kBatch, cs.h = 6, cs.w = 6, cs.c_in = 2, cs.c_out = 3;
  const float* w = m.params();
  const auto t = m.param_tensors();
  std::vector<float> conv(kBatch * 6 * 6 * 3), ws(kernels::conv2d_workspace_floats(cs));
  kernels::conv2d_forward_cpu(cs, x.data(), w + t[0].offset, w + t[1].offset, conv.data(),
                              ws.data());
  kernels::relu_forward_cpu(conv.data(), conv.data(), conv.size());
  return conv;
}

}  // namespace

TEST(Model, BackwardMatchesFiniteDifferences) {
  Model m(parse_model_spec(kSpec), kInput, kOutputs, kBatch);
  m.init_params(5);
  const double error = gradient_error(m, random_vector(kBatch * m.input_size(), 1),
                                      random_vector(kBatch * kOutputs, 2));
  std::printf("relative L2 error of the analytic gradient: %.2g\n", error);
  EXPECT_LT(error, 1e-2) << "over " << m.param_count() << " parameters";
}

TEST(Model, ReluThenPoolGivesWhatTheSpecSays) {
  // The model runs maxpool before relu; the outputs must be those of relu then maxpool, computed
  // here with the kernels in the spec's order (the OpenBLAS ones, so the model uses them too).
  Model m(parse_model_spec("conv3x3:3,relu,maxpool2,dense"), kInput, kOutputs, kBatch,
          {.cpu_kernels = CpuKernels::openblas});
  ASSERT_EQ("maxpool", m.plan()[1].spec.type);
  ASSERT_EQ("relu", m.plan()[2].spec.type);
  m.init_params(3);
  auto x = random_vector(kBatch * m.input_size(), 6);
  const float* y = m.forward(x.data(), kBatch);
  std::vector<float> out(y, y + kBatch * kOutputs);

  const float* w = m.params();
  const auto t = m.param_tensors();  // conv0.weight, conv0.bias, dense3.weight, dense3.bias
  std::vector<float> conv = conv_relu_reference(m, x);
  std::vector<float> pooled(kBatch * 3 * 3 * 3);
  std::vector<int32_t> argmax(pooled.size());
  kernels::maxpool_forward_cpu({kBatch, 6, 6, 3, 2}, conv.data(), pooled.data(), argmax.data());
  std::vector<float> ref(kBatch * kOutputs);
  kernels::dense_forward_cpu({kBatch, 27, kOutputs}, pooled.data(), w + t[2].offset,
                             w + t[3].offset, ref.data());
  for (size_t i = 0; i < ref.size(); ++i) EXPECT_EQ(ref[i], out[i]) << i;
}

TEST(Model, ConvThenReluFusedGivesWhatTheSpecSays) {
  // A convolution directly followed by a ReLU runs it in its own pass on the CPU; outputs must be
  // those of the two kernels in the spec's order, with either kernel set.
  for (CpuKernels k : {CpuKernels::openblas, CpuKernels::best}) {
    Model m(parse_model_spec("conv3x3:3,relu,dense"), kInput, kOutputs, kBatch, {.cpu_kernels = k});
    ASSERT_TRUE(m.plan()[0].fused_relu);
    m.init_params(3);
    auto x = random_vector(kBatch * m.input_size(), 6);
    const float* y = m.forward(x.data(), kBatch);
    std::vector<float> out(y, y + kBatch * kOutputs);

    const float* w = m.params();
    const auto t = m.param_tensors();  // conv0.weight, conv0.bias, dense2.weight, dense2.bias
    const std::vector<float> conv = conv_relu_reference(m, x);
    std::vector<float> ref(kBatch * kOutputs);
    kernels::dense_forward_cpu({kBatch, 108, kOutputs}, conv.data(), w + t[2].offset,
                               w + t[3].offset, ref.data());
    for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(ref[i], out[i], 1e-5) << i;
  }
}

TEST(Model, FusedConvReluBackwardMatchesFiniteDifferences) {
  // Two fused pairs (the second's ReLU would move after a max-pool, so none here), the gradient
  // of the summed MSE against central differences, with either kernel set.
  for (CpuKernels k : {CpuKernels::openblas, CpuKernels::best}) {
    Model m(parse_model_spec("conv3x3:3,relu,conv3x3:2,relu,dense"), kInput, kOutputs, kBatch,
            {.cpu_kernels = k});
    ASSERT_TRUE(m.plan()[0].fused_relu && m.plan()[2].fused_relu);
    m.init_params(9);
    EXPECT_LT(gradient_error(m, random_vector(kBatch * m.input_size(), 10),
                             random_vector(kBatch * kOutputs, 11)),
              1e-2)
        << "over " << m.param_count() << " parameters";
  }
}

// The Fashion-MNIST CNN on its input shape, one batch forward and back with either kernels, at a
// batch where oneDNN runs its direct convolutions and at one where it takes Winograd for the
// second (AVX-512, conv2d.h).
class ModelOnednn : public ::testing::TestWithParam<int> {};

TEST_P(ModelOnednn, LayersMatchTheOpenBlasOracle) {
  if (!kernels::onednn_built())
    GTEST_SKIP() << "this build has no oneDNN: the CPU layers are the OpenBLAS ones";
  const SampleShape input = {28, 28, 1};
  const int batch = GetParam(), classes = 10;
  Model fast(parse_model_spec("cnn"), input, classes, batch);
  Model oracle(parse_model_spec("cnn"), input, classes, batch,
               {.cpu_kernels = CpuKernels::openblas});
  // Where oneDNN lays the convolutions' activations out in 16-channel blocks (AVX-512), they stay
  // so from the first convolution to the second max-pool's input, ReLU included (the path this
  // comparison then covers); the oracle never does. The plan: conv, maxpool, relu, conv, maxpool,
  // relu, flatten, dense.
  // With Lockstep's Winograd (AVX-512 or AVX2), the second convolution runs the second pool and
  // its ReLU in its own passes; on AVX2 the activations stay NHWC throughout (LOCKSTEP_CPU_ISA=avx2
  // runs this test so on any machine: model_avx2_test).
  const auto& plan = fast.plan();
  ASSERT_EQ("maxpool", plan[4].spec.type);
  // The pools run the ReLUs after them (cpu_plan.h, through the layer types' hooks): the layers
  // they absorb become views.
  EXPECT_TRUE(plan[1].fused_relu && plan[4].fused_relu);
  EXPECT_TRUE(plan[2].absorbed && plan[5].absorbed);
  if (kernels::conv_pool_fast()) {
    // The first convolution runs the first pool.
    ASSERT_EQ(1u, plan[0].fused_next.size());
    EXPECT_EQ("maxpool", plan[0].fused_next[0].spec.type);
    EXPECT_TRUE(plan[1].absorbed);
  }
  const bool second_fused =
      kernels::winograd_fast() && (kernels::onednn_avx512() || kernels::winograd_on_nhwc());
  if (second_fused) {
    ASSERT_EQ(1u, plan[3].fused_next.size());
    EXPECT_EQ("maxpool", plan[3].fused_next[0].spec.type);
    EXPECT_TRUE(plan[4].absorbed);
  }
  if (kernels::onednn_avx512()) {
    for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(plan[i].out_blocked16) << "layer " << i;
    for (size_t i = 1; i < 5; ++i) EXPECT_TRUE(plan[i].in_blocked16) << "layer " << i;
    EXPECT_EQ(!second_fused, plan[3].out_blocked16) << "a fused pool writes the dense layer's NHWC";
  }
  if (kernels::winograd_on_nhwc()) {
    for (const LayerPlan& p : plan) EXPECT_FALSE(p.in_blocked16 || p.out_blocked16);
  }
  for (size_t i = 4; i < plan.size(); ++i) EXPECT_TRUE(plan[i].fused_next.empty()) << "layer " << i;
  for (size_t i = 4; i < plan.size(); ++i) EXPECT_FALSE(plan[i].out_blocked16) << "layer " << i;
  EXPECT_FALSE(plan[0].in_blocked16) << "the data is NHWC";
  for (const LayerPlan& p : oracle.plan()) EXPECT_FALSE(p.in_blocked16 || p.out_blocked16);
  fast.init_params(4);
  oracle.init_params(4);
  auto x = random_vector(batch * fast.input_size(), 8);
  std::vector<float> out[2], grads[2];
  int i = 0;
  for (Model* m : {&fast, &oracle}) {
    const float* y = m->forward(x.data(), batch);
    out[i].assign(y, y + batch * classes);
    // dLoss/dy: the outputs themselves (the loss sum(y^2)/2), so every path carries a gradient.
    std::copy(out[i].begin(), out[i].end(), m->output_grad());
    m->zero_grads();
    m->backward(batch);
    grads[i].assign(m->grads(), m->grads() + m->param_count());
    ++i;
  }
  for (size_t j = 0; j < out[1].size(); ++j)
    ASSERT_NEAR(out[0][j], out[1][j], 1e-5f * (1.0f + std::fabs(out[1][j]))) << "output " << j;
  for (size_t j = 0; j < grads[1].size(); ++j)
    ASSERT_NEAR(grads[0][j], grads[1][j], 1e-4f * (1.0f + std::fabs(grads[1][j])))
        << "gradient " << j;
}

INSTANTIATE_TEST_SUITE_P(Batches, ModelOnednn, ::testing::Values(8, 32));

TEST(Model, GradientsOfMicroBatchesAddUpToTheWholeBatch) {
  Model m(parse_model_spec(kSpec), kInput, kOutputs, kBatch);
  m.init_params(9);
  auto x = random_vector(kBatch * m.input_size(), 3);
  auto t = random_vector(kBatch * kOutputs, 4);
  m.zero_grads();
  double whole = loss(m, x, t, kBatch, true);
  std::vector<float> g(m.grads(), m.grads() + m.param_count());
  m.zero_grads();
  double parts = loss(m, x, t, 1, true, 0) + loss(m, x, t, 3, true, 1);
  EXPECT_NEAR(whole, parts, 1e-5 * std::fabs(whole));
  for (size_t i = 0; i < g.size(); ++i)
    ASSERT_NEAR(g[i], m.grads()[i], 1e-5f * (1.0f + std::fabs(g[i]))) << "parameter " << i;
}

TEST(Model, NamedTensorsCoverEveryParameterWithLayersAligned) {
  Model m(parse_model_spec("cnn"), {28, 28, 1}, 10, 2);
  auto tensors = m.param_tensors();
  ASSERT_EQ(6u, tensors.size());
  EXPECT_EQ("conv0.weight", tensors[0].name);
  EXPECT_EQ((std::vector<int64_t>{3, 3, 1, 32}), tensors[0].shape);
  EXPECT_EQ("dense6.bias", tensors[5].name);
  size_t next = 0, params = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    size_t count = 1;
    for (int64_t d : t.shape) count *= static_cast<size_t>(d);
    EXPECT_EQ(count, t.count) << t.name;
    if (i % 2 == 0) {
      // A layer's weight starts its range, on a 256-byte boundary (NCCL and cuBLAS get aligned
      // bucket pointers), at most one alignment step after the previous layer's bias.
      EXPECT_EQ(0u, t.offset * sizeof(float) % 256) << t.name;
      EXPECT_GE(t.offset, next) << t.name;
      EXPECT_LT(t.offset, next + kParamAlignFloats) << t.name;
    } else {
      EXPECT_EQ(next, t.offset) << t.name << ": a bias follows its weight";
    }
    next = t.offset + t.count;
    params += t.count;
  }
  EXPECT_EQ(m.param_count(), next) << "the buffer ends with the last bias";
  EXPECT_EQ(50186u, params);
  EXPECT_EQ(50186u, m.trainable_count());
  EXPECT_NE(std::string::npos, m.summary().find("total 50186 parameters")) << m.summary();
  // The preset writes relu before maxpool2; the summary shows the order run and says why.
  EXPECT_NE(std::string::npos,
            m.summary().find("relu (14, 14, 32) -> (14, 14, 32) (written before maxpool2, run "
                             "after it: the same values, fewer of them)\n"))
      << m.summary();

  // The spans bucket assignment uses start at each layer's range and add up to the buffer.
  const std::vector<size_t> spans = m.layer_spans();
  ASSERT_EQ(m.plan().size(), spans.size());
  size_t at = 0;
  for (size_t i = 0; i < spans.size(); ++i) {
    if (m.plan()[i].params == 0) {
      EXPECT_EQ(0u, spans[i]) << "layer " << i;
      continue;
    }
    EXPECT_EQ(0u, at % kParamAlignFloats) << "layer " << i;
    EXPECT_GE(spans[i], m.plan()[i].params) << "layer " << i;
    at += spans[i];
  }
  EXPECT_EQ(m.param_count(), at);
}

TEST(Model, AlignmentGapsStayZeroThroughInitialisationAndTraining) {
  Model m(parse_model_spec(kSpec), kInput, kOutputs, kBatch);
  ASSERT_GT(m.param_count(), m.trainable_count()) << "this spec must leave gaps to check";
  m.init_params(7);
  auto x = random_vector(kBatch * m.input_size(), 1);
  auto t = random_vector(kBatch * kOutputs, 2);
  m.zero_grads();
  loss(m, x, t, kBatch, true);
  std::vector<bool> in_tensor(m.param_count(), false);
  for (const auto& p : m.param_tensors())
    for (size_t i = p.offset; i < p.offset + p.count; ++i) in_tensor[i] = true;
  size_t gaps = 0;
  for (size_t i = 0; i < m.param_count(); ++i) {
    if (in_tensor[i]) continue;
    ++gaps;
    EXPECT_EQ(0.0f, m.params()[i]) << "parameter gap at " << i;
    EXPECT_EQ(0.0f, m.grads()[i]) << "gradient gap at " << i;
  }
  EXPECT_EQ(m.param_count() - m.trainable_count(), gaps);
}

TEST(Model, InitialisationDependsOnTheSeedOnly) {
  Model a(parse_model_spec("mlp:16"), {7}, 2, 4), b(parse_model_spec("mlp:16"), {7}, 2, 9);
  a.init_params(42);
  b.init_params(42);
  ASSERT_EQ(a.param_count(), b.param_count());
  EXPECT_EQ(0, std::memcmp(a.params(), b.params(), a.param_count() * sizeof(float)));
  b.init_params(43);
  EXPECT_NE(0, std::memcmp(a.params(), b.params(), a.param_count() * sizeof(float)));
  // PyTorch's default bound: +-1/sqrt(fan_in) for the first layer (fan_in 7).
  float bound = 1.0f / std::sqrt(7.0f), largest = 0;
  for (size_t i = 0; i < 7 * 16; ++i) largest = std::max(largest, std::fabs(a.params()[i]));
  EXPECT_LE(largest, bound);
  EXPECT_GT(largest, 0.8f * bound);
}

TEST(Model, RefusesBatchesLargerThanItsBuffers) {
  Model m(parse_model_spec("linear"), {3}, 1, 2);
  std::vector<float> x(9, 0.0f);
  EXPECT_THROW(m.forward(x.data(), 3), Error);
}

// On CUDA with LOCKSTEP_CUDA_CONV_POOL=fused the CNN's first convolution runs the max-pool and the
// ReLU after it (plan_cuda, through the conv type's fuses_next_cuda): both become views; the second
// convolution (not first, 32 channels in) and everything after run as written. Without the knob
// the plan is untouched.
TEST(ModelPlan, CudaFusesTheFirstConvolutionWithThePoolAndReluWhenAsked) {
  const auto planned = [] {
    return commute_activations(plan_model(parse_model_spec("cnn"), {28, 28, 1}, 10));
  };
  std::vector<LayerPlan> plan = planned();
  ASSERT_EQ("conv", plan[0].spec.type);
  ASSERT_EQ("maxpool", plan[1].spec.type);
  ASSERT_EQ("relu", plan[2].spec.type);
  plan_cuda(plan, false);
  for (const LayerPlan& p : plan) EXPECT_TRUE(p.fused_next.empty() && !p.absorbed);
  plan_cuda(plan, true);
  ASSERT_EQ(1u, plan[0].fused_next.size());
  EXPECT_EQ("maxpool", plan[0].fused_next[0].spec.type);
  EXPECT_TRUE(plan[0].fused_next[0].fused_relu);
  EXPECT_TRUE(plan[1].absorbed && plan[2].absorbed);
  EXPECT_EQ(2, fused_pool(plan[0]).k);
  EXPECT_TRUE(fused_pool(plan[0]).relu);
  for (size_t i = 3; i < plan.size(); ++i)
    EXPECT_TRUE(plan[i].fused_next.empty() && !plan[i].absorbed) << "layer " << i;
  // Without a ReLU after the pool the kernels run the pool alone; a first layer over three
  // channels, or with 24 outputs (not a multiple of 16), is not fused.
  std::vector<LayerPlan> no_relu =
      plan_model(parse_model_spec("conv3x3:16,maxpool2,flatten,dense"), {8, 8, 1}, 4);
  plan_cuda(no_relu, true);
  ASSERT_EQ(1u, no_relu[0].fused_next.size());
  EXPECT_FALSE(no_relu[0].fused_next[0].fused_relu);
  EXPECT_TRUE(no_relu[1].absorbed && !no_relu[2].absorbed);
  for (const auto& [spec, input] :
       {std::pair<const char*, SampleShape>{"conv3x3:16,maxpool2,flatten,dense", {8, 8, 3}},
        {"conv3x3:24,maxpool2,flatten,dense", {8, 8, 1}}}) {
    std::vector<LayerPlan> other = plan_model(parse_model_spec(spec), input, 4);
    plan_cuda(other, true);
    for (const LayerPlan& p : other) EXPECT_TRUE(p.fused_next.empty() && !p.absorbed) << spec;
  }
}
