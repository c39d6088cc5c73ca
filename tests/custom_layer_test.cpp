// The example's own layer (apps/examples/custom_layer: "layernorm"), through the public API only,
// as a user's program includes it (<lockstep/...>): registered, its specs parse, round-trip and
// build; with gamma 1 and beta 0 every row of its output has mean 0 and variance 1, over the last
// dimension of the sample's shape; its parameter and input gradients match finite differences; it
// is refused on CUDA by name, from the spec alone and when a model is built (no GPU needed).
#include <gtest/gtest.h>
#include <lockstep/base/error.h>
#include <lockstep/model/layer_registry.h>
#include <lockstep/model/model.h>

#include <cmath>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "layer_norm.h"

using namespace lockstep;

namespace {

std::vector<float> random_vector(size_t n, uint64_t seed, float scale = 1.0f, float offset = 0) {
  std::mt19937_64 gen(seed);
  std::vector<float> v(n);
  fill_uniform(v.data(), n, 1.0f, gen);
  for (float& x : v) x = offset + scale * x;
  return v;
}

std::string usage_message(const std::function<void()>& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

// A copy: the model's list is built anew at every call.
std::optional<ParamTensorInfo> tensor(const Model& m, const std::string& name) {
  for (const ParamTensorInfo& t : m.param_tensors())
    if (t.name == name) return t;
  return std::nullopt;
}

}  // namespace

TEST(CustomLayer, TheExampleSpecParsesAndBuilds) {
  example::register_layer_norm();
  example::register_layer_norm();  // a second call does nothing
  const ModelSpec s = parse_model_spec("flatten, layernorm, dense:32, relu, dense");
  EXPECT_EQ("flatten,layernorm,dense:32,relu,dense", to_string(s));
  ASSERT_EQ(5u, s.layers.size());
  EXPECT_EQ("layernorm", s.layers[1].type);
  EXPECT_NE(std::string::npos, layer_grammar().find("layernorm")) << layer_grammar();

  Model m(s, {28, 28, 1}, 10, 8);
  EXPECT_EQ(2u * 784, m.plan()[1].params);
  const std::optional<ParamTensorInfo> gamma = tensor(m, "layernorm1.gamma");
  ASSERT_TRUE(gamma) << "no tensor layernorm1.gamma";
  EXPECT_EQ(784u, gamma->count);
  const std::optional<ParamTensorInfo> beta = tensor(m, "layernorm1.beta");
  ASSERT_TRUE(beta) << "no tensor layernorm1.beta";
  EXPECT_EQ(784u, beta->count);
  m.init_params(1);
  const std::vector<float> p = m.params_to_host();
  for (size_t j = 0; j < 784; ++j) {
    ASSERT_EQ(1.0f, p[gamma->offset + j]) << "gamma " << j;
    ASSERT_EQ(0.0f, p[beta->offset + j]) << "beta " << j;
  }
  const auto x = random_vector(8 * 784, 3);
  const float* out = m.forward(x.data(), 8);
  for (int i = 0; i < 8 * 10; ++i) ASSERT_TRUE(std::isfinite(out[i])) << "output " << i;

  // A one-value last dimension cannot be normalised: refused when planned, naming the layer.
  const std::string e = usage_message([] {
    Model(parse_model_spec("layernorm,dense"), {4, 4, 1}, 3, 2);
  });
  EXPECT_NE(std::string::npos, e.find("layernorm")) << e;
  EXPECT_NE(std::string::npos, e.find("last dimension")) << e;
}

TEST(CustomLayer, RowsHaveMeanZeroAndVarianceOne) {
  example::register_layer_norm();
  // Vectors: each sample's 64 values are one row. Images (H, W, C): each pixel's C channels are.
  struct Case {
    SampleShape shape;
    int width;
  };
  for (const Case& c : {Case{{64}, 64}, Case{{3, 4, 5}, 5}}) {
    const int batch = 6;
    const int n = static_cast<int>(shape_size(c.shape));
    // flatten after it: a model's output is one vector per sample; a view, so y is layernorm's.
    Model m(parse_model_spec("layernorm,flatten"), c.shape, n, batch);
    m.init_params(7);
    // Far from normalised: offset 40, spread 25.
    const auto x = random_vector(static_cast<size_t>(batch) * n, 5, 25.0f, 40.0f);
    const float* y = m.forward(x.data(), batch);
    for (int r = 0; r < batch * n / c.width; ++r) {
      double sum = 0, sq = 0;
      for (int j = 0; j < c.width; ++j) sum += y[r * c.width + j];
      const double mean = sum / c.width;
      for (int j = 0; j < c.width; ++j) {
        const double d = y[r * c.width + j] - mean;
        sq += d * d;
      }
      EXPECT_NEAR(0.0, mean, 1e-5) << "row " << r << " of shape " << to_string(c.shape);
      EXPECT_NEAR(1.0, sq / c.width, 1e-4) << "row " << r << " of shape " << to_string(c.shape);
    }
  }
}

// sum(out * w) for fixed w, in double; with grads, its gradient accumulated into m.grads().
double linear_loss(Model& m, const std::vector<float>& x, const std::vector<float>& w, int batch,
                   bool grads) {
  const float* out = m.forward(x.data(), batch);
  double sum = 0;
  for (size_t i = 0; i < w.size(); ++i) sum += static_cast<double>(out[i]) * w[i];
  if (grads) {
    std::copy(w.begin(), w.end(), m.output_grad());
    m.backward(batch);
  }
  return sum;
}

TEST(CustomLayer, GradientsMatchFiniteDifferences) {
  example::register_layer_norm();
  // The dense layer before it gets its gradient through layernorm's dx; gamma and beta are moved
  // off 1 and 0 so that every term of the backward pass counts.
  const int batch = 4, outputs = 3;
  Model m(parse_model_spec("dense:6,layernorm,dense"), {5}, outputs, batch);
  m.init_params(13);
  std::vector<float> host = m.params_to_host();
  const ParamRange& norm = m.param_ranges()[1];
  ASSERT_EQ(12u, norm.count);
  const auto shift = random_vector(norm.count, 17, 0.5f);
  for (size_t j = 0; j < norm.count; ++j) host[norm.offset + j] += shift[j];
  m.write_params(norm.offset, host.data() + norm.offset, norm.count);

  const auto x = random_vector(batch * 5, 19, 2.0f);
  const auto w = random_vector(batch * outputs, 23);
  m.zero_grads();
  linear_loss(m, x, w, batch, true);
  const std::vector<float> grads(m.grads(), m.grads() + host.size());
  int checked = 0;
  const float eps = 1e-2f;
  for (const ParamRange& range : m.param_ranges()) {
    for (size_t j = 0; j < range.count; ++j) {
      const size_t i = range.offset + j;
      const float keep = host[i];
      m.write_params(i, &(host[i] = keep + eps), 1);
      const double up = linear_loss(m, x, w, batch, false);
      m.write_params(i, &(host[i] = keep - eps), 1);
      const double down = linear_loss(m, x, w, batch, false);
      m.write_params(i, &(host[i] = keep), 1);
      const double numeric = (up - down) / (2 * eps);
      EXPECT_NEAR(numeric, grads[i], 2e-3 + 1e-2 * std::fabs(numeric))
          << "layer " << range.layer << " parameter " << j;
      ++checked;
    }
  }
  EXPECT_EQ(36 + 12 + 21, checked);
}

TEST(CustomLayer, OnCudaItIsRefusedByName) {
  example::register_layer_norm();
  const std::string spec_error =
      usage_message([] { check_cuda_layers(parse_model_spec("flatten,layernorm,dense")); });
  EXPECT_NE(std::string::npos, spec_error.find("layer 2 (layernorm)")) << spec_error;
  EXPECT_NE(std::string::npos, spec_error.find("no CUDA implementation")) << spec_error;
  EXPECT_NE(std::string::npos, spec_error.find("--device cpu")) << spec_error;
  EXPECT_EQ("", usage_message([] { check_cuda_layers(parse_model_spec("cnn")); }));

  ModelPlacement cuda;
  cuda.device = DeviceKind::cuda;
  const std::string build_error = usage_message([&] {
    Model(parse_model_spec("flatten,layernorm,dense"), {4, 4, 1}, 3, 2, cuda);
  });
  EXPECT_EQ(spec_error, build_error);
}
