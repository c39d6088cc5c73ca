// The layer registry: a layer type registered by a test (not built in) is a --model word like the
// built-in ones (its specs parse, round-trip, plan, build a model that trains: forward matches the
// model without it, backward matches finite differences); a taken name is refused with a message;
// an unknown name is answered with the known ones; a CPU-only type on CUDA is refused when the
// model is built, before any device work (so this runs without a GPU); a registered type takes
// part in the CPU plan through the LayerType's plan hooks, as the built-in ones do (cpu_plan.h).
#include "runtime/model/layer_registry.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/activation.h"
#include "kernels/step/loss.h"
#include "runtime/base/error.h"
#include "runtime/model/model.h"
#include "test_util.h"

using namespace lockstep;
using lockstep::testing_util::usage_message;

namespace {

// "test_gain": y = w * x elementwise, one weight per input value, all starting at 1. CPU only.
class GainLayer : public Layer {
 public:
  using Layer::Layer;
  void forward(int batch, const float* x, float* y, float*) override {
    const size_t n = in_size();
    for (size_t b = 0; b < static_cast<size_t>(batch); ++b)
      for (size_t j = 0; j < n; ++j) y[b * n + j] = params_[j] * x[b * n + j];
  }
  void backward(int batch, const float* x, const float*, const float* dy, float* dx,
                float*) override {
    const size_t n = in_size();
    for (size_t b = 0; b < static_cast<size_t>(batch); ++b)
      for (size_t j = 0; j < n; ++j) {
        grads_[j] += x[b * n + j] * dy[b * n + j];
        if (dx) dx[b * n + j] = params_[j] * dy[b * n + j];
      }
  }
};

// "test_gain_relu": the same gain, whose type says (fuses_activation) that it applies a ReLU after
// it in its own pass: the planner then marks it fused_relu and the ReLU layer absorbed. It runs
// the ReLU kernels itself, so fused or not the model computes the same bits.
class GainReluLayer : public GainLayer {
 public:
  using GainLayer::GainLayer;
  void forward(int batch, const float* x, float* y, float* workspace) override {
    GainLayer::forward(batch, x, y, workspace);
    if (plan_.fused_relu) kernels::relu_forward_cpu(y, y, static_cast<size_t>(batch) * out_size());
  }
  void backward(int batch, const float* x, const float* y, const float* dy, float* dx,
                float* workspace) override {
    if (plan_.fused_relu) {
      masked_.resize(static_cast<size_t>(batch) * out_size());
      kernels::relu_backward_cpu(y, dy, masked_.data(), masked_.size());
      dy = masked_.data();
    }
    GainLayer::backward(batch, x, y, dy, dx, workspace);
  }

 private:
  std::vector<float> masked_;
};

LayerType gain_type() {
  LayerType t;
  t.name = "test_gain";
  t.syntax = "test_gain";
  t.parse = [](const LayerToken& tok) {
    tok.expect_args(0, 0);
    return std::vector<int>{};
  };
  t.format = [](const LayerSpec&) { return std::string("test_gain"); };
  t.plan = [](LayerPlan& p, const LayerCheck&) {
    p.out = p.in;
    p.params = shape_size(p.in);
  };
  t.init = [](const LayerPlan& p, float* host, std::mt19937_64&) {
    std::fill(host, host + p.params, 1.0f);
  };
  t.tensors = [](const LayerPlan& p) {
    return std::vector<LayerTensor>{{"weight", {static_cast<int64_t>(p.params)}}};
  };
  t.make_cpu = [](const LayerPlan& p, CpuKernels) -> std::unique_ptr<Layer> {
    return std::make_unique<GainLayer>(p);
  };
  return t;
}

LayerType gain_relu_type() {
  LayerType t = gain_type();
  t.name = t.syntax = "test_gain_relu";
  t.format = [](const LayerSpec&) { return std::string("test_gain_relu"); };
  t.make_cpu = [](const LayerPlan& p, CpuKernels) -> std::unique_ptr<Layer> {
    return std::make_unique<GainReluLayer>(p);
  };
  t.fuses_activation = [](const LayerPlan&, Activation a) { return a == Activation::relu; };
  return t;
}

void register_test_layers() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_layer(gain_type());
    register_layer(gain_relu_type());
  });
}

constexpr int kBatch = 4, kOutputs = 3;
const SampleShape kInput = {5};

std::vector<float> random_vector(size_t n, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::vector<float> v(n);
  fill_uniform(v.data(), n, 1.0f, gen);
  return v;
}

// sum(out * weights): a loss whose output gradient is `weights`; with grads, back-propagated.
double linear_loss(Model& m, const std::vector<float>& x, const std::vector<float>& w, bool grads) {
  const float* out = m.forward(x.data(), kBatch);
  double sum = 0;
  for (size_t i = 0; i < w.size(); ++i) sum += static_cast<double>(out[i]) * w[i];
  if (grads) {
    std::copy(w.begin(), w.end(), m.output_grad());
    m.backward(kBatch);
  }
  return sum;
}

}  // namespace

TEST(LayerRegistry, ARegisteredLayerIsAModelWordThatTrains) {
  register_test_layers();
  const std::string spec = "dense:6, test_gain, relu, dense";
  ModelSpec s = parse_model_spec(spec);
  EXPECT_EQ("dense:6,test_gain,relu,dense", to_string(s));
  ASSERT_EQ(4u, s.layers.size());
  EXPECT_EQ("test_gain", s.layers[1].type);

  Model with(s, kInput, kOutputs, kBatch);
  Model without(parse_model_spec("dense:6,relu,dense"), kInput, kOutputs, kBatch);
  EXPECT_EQ(6u, with.plan()[1].params);
  bool named = false;
  for (const ParamTensorInfo& t : with.param_tensors())
    named = named || (t.name == "test_gain1.weight" && t.count == 6);
  EXPECT_TRUE(named) << "no tensor test_gain1.weight of 6 values";

  // The gain draws nothing and starts at 1, so both models' dense layers get the same values and
  // give the same outputs.
  with.init_params(11);
  without.init_params(11);
  const auto x = random_vector(kBatch * kInput[0], 1);
  const float* a = with.forward(x.data(), kBatch);
  std::vector<float> out_with(a, a + kBatch * kOutputs);
  const float* b = without.forward(x.data(), kBatch);
  for (int i = 0; i < kBatch * kOutputs; ++i) EXPECT_EQ(out_with[i], b[i]) << "output " << i;

  // The gain's gradients match finite differences of the loss.
  const auto w = random_vector(kBatch * kOutputs, 2);
  with.zero_grads();
  linear_loss(with, x, w, true);
  const ParamRange& gain = with.param_ranges()[1];
  ASSERT_EQ(1, gain.layer);
  std::vector<float> host = with.params_to_host();
  const float eps = 1e-3f;
  for (size_t j = 0; j < gain.count; ++j) {
    const size_t i = gain.offset + j;
    const float keep = host[i];
    with.write_params(i, &(host[i] = keep + eps), 1);
    const double up = linear_loss(with, x, w, false);
    with.write_params(i, &(host[i] = keep - eps), 1);
    const double down = linear_loss(with, x, w, false);
    with.write_params(i, &(host[i] = keep), 1);
    EXPECT_NEAR((up - down) / (2 * eps), with.grads()[i], 1e-3) << "gain weight " << j;
  }
}

TEST(LayerRegistry, ARegisteredLayerTakesPartInTheCpuPlanThroughItsHooks) {
  register_test_layers();
  for (CpuKernels k : {CpuKernels::best, CpuKernels::openblas}) {
    Model fused(parse_model_spec("dense:6,test_gain_relu,relu,dense"), kInput, kOutputs, kBatch,
                {.cpu_kernels = k});
    Model plain(parse_model_spec("dense:6,test_gain,relu,dense"), kInput, kOutputs, kBatch,
                {.cpu_kernels = k});
    EXPECT_TRUE(fused.plan()[1].fused_relu);
    EXPECT_TRUE(fused.plan()[2].absorbed) << "the ReLU runs in the gain layer";
    EXPECT_FALSE(plain.plan()[1].fused_relu || plain.plan()[2].absorbed);

    // Both start alike (the gains at 1) and compute the same bits, forward and backward; the
    // dense layer's outputs are of both signs, so the ReLU cuts some.
    fused.init_params(11);
    plain.init_params(11);
    const auto x = random_vector(kBatch * kInput[0], 3);
    const auto w = random_vector(kBatch * kOutputs, 4);
    double loss[2];
    std::vector<float> out[2], grads[2];
    int i = 0;
    for (Model* m : {&fused, &plain}) {
      m->zero_grads();
      loss[i] = linear_loss(*m, x, w, true);
      const float* y = m->forward(x.data(), kBatch);
      out[i].assign(y, y + kBatch * kOutputs);
      grads[i].assign(m->grads(), m->grads() + m->param_count());
      ++i;
    }
    EXPECT_EQ(loss[1], loss[0]);
    EXPECT_EQ(out[1], out[0]);
    EXPECT_EQ(grads[1], grads[0]);
  }
}

TEST(LayerRegistry, ATakenNameIsRefusedWithAMessage) {
  register_test_layers();
  for (const char* name : {"test_gain", "dense"}) {
    LayerType t = gain_type();
    t.name = name;
    try {
      register_layer(t);
      ADD_FAILURE() << "a second '" << name << "' was registered";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string::npos, std::string(e.what()).find("already registered")) << e.what();
      EXPECT_NE(std::string::npos, std::string(e.what()).find(name)) << e.what();
    }
  }
  LayerType incomplete;
  incomplete.name = "test_incomplete";
  EXPECT_THROW(register_layer(incomplete), std::invalid_argument);
}

TEST(LayerRegistry, UnknownNamesAreAnsweredWithTheKnownOnes) {
  register_test_layers();
  const std::string m = usage_message([] { find_layer_type("tanh"); });
  for (const char* known : {"'tanh'", "dense", "conv", "maxpool", "relu", "flatten", "test_gain"})
    EXPECT_NE(std::string::npos, m.find(known)) << m;
  const std::string p = usage_message([] { parse_model_spec("dense:8,tanh,dense"); });
  EXPECT_NE(std::string::npos, p.find("unknown layer 'tanh'")) << p;
  EXPECT_NE(std::string::npos,
            p.find("maxpoolK, relu, flatten, embed:dim:ctx[:vocab], block:heads, lmhead, "
                   "test_gain, test_gain_relu, joined by ','"))
      << p;
  // A word that only starts with a name is not that layer unless the type takes a suffix.
  EXPECT_NE(std::string::npos,
            usage_message([] { parse_model_spec("relu2,dense"); }).find("unknown layer 'relu2'"));
  EXPECT_EQ("maxpool3", to_string(parse_model_spec("maxpool3")));
}

TEST(LayerRegistry, ACpuOnlyLayerOnCudaIsRefusedBeforeTheDevice) {
  register_test_layers();
  ModelPlacement cuda;
  cuda.device = DeviceKind::cuda;
  const std::string m = usage_message(
      [&] { Model(parse_model_spec("dense:6,test_gain,dense"), kInput, kOutputs, kBatch, cuda); });
  EXPECT_NE(std::string::npos, m.find("layer 2 (test_gain)")) << m;
  EXPECT_NE(std::string::npos, m.find("no CUDA implementation")) << m;
  EXPECT_NE(std::string::npos, m.find("--device cpu")) << m;
}
