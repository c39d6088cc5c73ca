#include "layer_norm.h"

#include <algorithm>
#include <cmath>
#include <mutex>

namespace example {
namespace {

namespace ls = lockstep;

// Rows of `width` values: every sample holds in_size() / width of them. Statistics are summed in
// double, so a row of large, nearly equal values keeps its variance.
class LayerNorm : public ls::Layer {
 public:
  using Layer::Layer;

  void forward(int batch, const float* x, float* y, float*) override {
    const size_t w = width();
    const float* gamma = params_;
    const float* beta = params_ + w;
    for (size_t r = 0; r < rows(batch); ++r) {
      const float* xr = x + r * w;
      float* yr = y + r * w;
      const Stats s = stats(xr, w);
      for (size_t j = 0; j < w; ++j)
        yr[j] = gamma[j] * static_cast<float>((xr[j] - s.mean) * s.rstd) + beta[j];
    }
  }

  // With xhat = (x - mean) * rstd and g = dy * gamma: dgamma += dy * xhat, dbeta += dy, and
  // dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) (the mean and variance depend on x too).
  void backward(int batch, const float* x, const float*, const float* dy, float* dx,
                float*) override {
    const size_t w = width();
    const float* gamma = params_;
    float* dgamma = grads_;
    float* dbeta = grads_ + w;
    for (size_t r = 0; r < rows(batch); ++r) {
      const float* xr = x + r * w;
      const float* dyr = dy + r * w;
      const Stats s = stats(xr, w);
      double g_sum = 0, gx_sum = 0;
      for (size_t j = 0; j < w; ++j) {
        const double xhat = (xr[j] - s.mean) * s.rstd;
        const double g = static_cast<double>(dyr[j]) * gamma[j];
        dgamma[j] += static_cast<float>(dyr[j] * xhat);
        dbeta[j] += dyr[j];
        g_sum += g;
        gx_sum += g * xhat;
      }
      if (dx == nullptr) continue;  // the first layer: nothing below wants dx
      const double g_mean = g_sum / static_cast<double>(w);
      const double gx_mean = gx_sum / static_cast<double>(w);
      for (size_t j = 0; j < w; ++j) {
        const double xhat = (xr[j] - s.mean) * s.rstd;
        const double g = static_cast<double>(dyr[j]) * gamma[j];
        dx[r * w + j] = static_cast<float>(s.rstd * (g - g_mean - xhat * gx_mean));
      }
    }
  }

 private:
  struct Stats {
    double mean, rstd;
  };
  static Stats stats(const float* x, size_t w) {
    double sum = 0, sq = 0;
    for (size_t j = 0; j < w; ++j) sum += x[j];
    const double mean = sum / static_cast<double>(w);
    for (size_t j = 0; j < w; ++j) sq += (x[j] - mean) * (x[j] - mean);
    return {mean, 1.0 / std::sqrt(sq / static_cast<double>(w) + kLayerNormEps)};
  }
  size_t width() const { return static_cast<size_t>(plan_.in.back()); }
  size_t rows(int batch) const { return static_cast<size_t>(batch) * in_size() / width(); }
};

}  // namespace

lockstep::LayerType layer_norm_type() {
  ls::LayerType t;
  t.name = "layernorm";
  t.syntax = "layernorm";
  t.parse = [](const ls::LayerToken& tok) {
    tok.expect_args(0, 0);
    return std::vector<int>{};
  };
  t.format = [](const ls::LayerSpec&) { return std::string("layernorm"); };
  t.plan = [](ls::LayerPlan& p, const ls::LayerCheck& check) {
    if (p.in.empty() || p.in.back() < 2)
      check.fail(
          " normalises over the last dimension, which needs at least 2 values, and its "
          "input is " +
          ls::to_string(p.in));
    p.out = p.in;
    p.params = 2 * static_cast<size_t>(p.in.back());  // gamma, then beta
  };
  // Draws nothing from the generator: the layers after it start as they would without it.
  t.init = [](const ls::LayerPlan& p, float* host, std::mt19937_64&) {
    const size_t w = p.params / 2;
    std::fill(host, host + w, 1.0f);
    std::fill(host + w, host + p.params, 0.0f);
  };
  // The names its checkpoint datasets carry: layernorm1.gamma, layernorm1.beta.
  t.tensors = [](const ls::LayerPlan& p) {
    const int64_t w = p.in.back();
    return std::vector<ls::LayerTensor>{{"gamma", {w}}, {"beta", {w}}};
  };
  t.make_cpu = [](const ls::LayerPlan& p, ls::CpuKernels) -> std::unique_ptr<ls::Layer> {
    return std::make_unique<LayerNorm>(p);
  };
  // No make_cuda: a CPU-only type. Per sample, about 8 flops per value (mean, variance, scale).
  t.forward_flops = [](const ls::LayerPlan& p) { return 8.0 * ls::shape_size(p.in); };
  return t;
}

void register_layer_norm() {
  static std::once_flag once;
  std::call_once(once, [] { lockstep::register_layer(layer_norm_type()); });
}

}  // namespace example
