// The GPT building blocks other than attention (kernels_attention_test.cpp): GELU (tanh), layer
// norm, token + position embedding, the residual add, and the cross-entropy of loss.h over every
// position of a byte-level sequence batch. Each against a double-precision reference or a known
// value, and its backward pass against finite differences of its own forward kernel.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <vector>

#include "kernel_reference.h"
#include "kernels/gpt/embedding.h"
#include "kernels/gpt/gelu.h"
#include "kernels/gpt/layernorm.h"
#include "kernels/gpt/residual.h"
#include "kernels/onednn/onednn.h"
#include "kernels/parallel.h"
#include "kernels/step/loss.h"

namespace lockstep::kernels {
namespace {

using kernel_test::max_rel_error;
using kernel_test::random_floats;

double gelu_ref(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

TEST(Gelu, ForwardMatchesTheTanhFormulaAndKnownValues) {
  auto x = random_floats(1000, 1, -6.0f, 6.0f);
  x.insert(x.end(), {0.0f, 1.0f, -1.0f, 10.0f, -10.0f});
  std::vector<float> y(x.size());
  gelu_forward_cpu(x.data(), y.data(), x.size());
  std::vector<double> ref(x.size());
  for (size_t i = 0; i < x.size(); ++i) ref[i] = gelu_ref(x[i]);
  EXPECT_LT(max_rel_error(y, ref), 1e-6);
  // gelu(0) = 0; gelu(1) = 0.841192 (PyTorch's gelu(1.0, approximate='tanh')); large |x|: x or 0.
  EXPECT_EQ(y[1000], 0.0f);
  EXPECT_NEAR(y[1001], 0.8411920, 1e-6);
  EXPECT_NEAR(y[1002], -0.1588080, 1e-6);
  EXPECT_FLOAT_EQ(y[1003], 10.0f);
  EXPECT_NEAR(y[1004], 0.0f, 1e-6);
}

TEST(Gelu, BackwardMatchesFiniteDifferencesAndRunsInPlace) {
  auto x = random_floats(200, 2, -4.0f, 4.0f);
  const auto r = kernel_test::to_double(random_floats(x.size(), 3));
  const std::vector<float> rf(r.begin(), r.end());
  std::vector<float> y(x.size()), dx(x.size());
  gelu_backward_cpu(x.data(), rf.data(), dx.data(), x.size());
  auto objective = [&] {
    gelu_forward_cpu(x.data(), y.data(), x.size());
    return kernel_test::dot(r, y.data(), y.size());
  };
  kernel_test::expect_gradient(x, dx, objective, {.step = 1e-3, .samples = 200}, "dx");
  std::vector<float> inplace = rf;  // dx aliases dy
  gelu_backward_cpu(x.data(), inplace.data(), inplace.data(), x.size());
  EXPECT_EQ(inplace, dx);
}

// Each build the CPU has (AVX-512, AVX2 with FMA, the baseline; kernels/parallel.h) gives a value
// the same bits wherever it sits: in a vector's lane or among the last few values that a build
// computes one by one (where a thread's chunk ends, so at any thread count). The AVX2 build gives
// the AVX-512 build's bits (an AVX2 machine trains as an AVX-512 one does), and every build stays
// on the formula, edges included: the exp's clamps, infinities, NaN, tiny and huge values.
class GeluBuilds : public ::testing::Test {
 protected:
  // The cap the process runs under (LOCKSTEP_CPU_ISA: ctest runs this file capped too) comes back.
  void SetUp() override { cap_ = cpu_isa_cap().load(); }
  void TearDown() override { set_cpu_isa_cap(cap_); }
  CpuIsa cap_ = CpuIsa::native;
};

bool same_bits(float a, float b) {
  return std::memcmp(&a, &b, sizeof a) == 0 || (std::isnan(a) && std::isnan(b));
}

TEST_F(GeluBuilds, EveryBuildGivesAValueTheSameBitsInAnyLaneAndAvx2MatchesAvx512) {
  auto x = random_floats(4096, 21, -12.0f, 12.0f);
  const float inf = std::numeric_limits<float>::infinity();
  for (float v : {0.0f, -0.0f, 1.0f, -1.0f, 3.0f, -3.0f, 1e-30f, -1e-30f, 1e-45f, 30.0f, -30.0f,
                  1e10f, -1e10f, 3e38f, -3e38f, inf, -inf, std::nanf("")})
    x.push_back(v);
  const size_t n = x.size();  // 4114: vectors of 16, 8 and 4, and a tail of 2
  const auto dy = random_floats(n, 22);
  struct Result {
    bool ran = false;
    std::vector<float> y, dx, y_shifted, dx_shifted;
  };
  std::vector<float> shifted(x.begin() + 1, x.end()), dy_shifted(dy.begin() + 1, dy.end());
  auto run = [&](CpuIsa cap) {
    set_cpu_isa_cap(cap);
    Result r;
    r.ran = true;
    r.y.resize(n);
    r.dx.resize(n);
    gelu_forward_cpu(x.data(), r.y.data(), n);
    gelu_backward_cpu(x.data(), dy.data(), r.dx.data(), n);
    // Every value one place earlier: lanes become tails and the other way round.
    r.y_shifted.resize(n - 1);
    r.dx_shifted.resize(n - 1);
    gelu_forward_cpu(shifted.data(), r.y_shifted.data(), n - 1);
    gelu_backward_cpu(shifted.data(), dy_shifted.data(), r.dx_shifted.data(), n - 1);
    return r;
  };
  std::vector<std::pair<const char*, Result>> builds;
  builds.push_back({"native", run(CpuIsa::native)});
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    builds.push_back({"avx2", run(CpuIsa::avx2)});
  builds.push_back({"baseline", run(CpuIsa::baseline)});
  for (const auto& [name, r] : builds) {
    SCOPED_TRACE(name);
    size_t moved = 0;
    for (size_t i = 1; i < n; ++i)
      moved += !same_bits(r.y[i], r.y_shifted[i - 1]) + !same_bits(r.dx[i], r.dx_shifted[i - 1]);
    EXPECT_EQ(moved, 0u) << "values that change with their place in the buffer";
    std::vector<double> ref(n);
    for (size_t i = 0; i < 4096; ++i) ref[i] = gelu_ref(x[i]);
    EXPECT_LT(max_rel_error(std::vector<float>(r.y.begin(), r.y.begin() + 4096),
                            std::vector<double>(ref.begin(), ref.begin() + 4096)),
              1e-6);
    EXPECT_EQ(r.y[4096], 0.0f);
    EXPECT_TRUE(std::signbit(r.y[4097])) << "gelu(-0) is -0";
    EXPECT_NEAR(r.y[4098], 0.8411920, 1e-6);
    EXPECT_FLOAT_EQ(r.y[4105], 30.0f);
    EXPECT_NEAR(r.y[4106], 0.0f, 1e-30);
    EXPECT_EQ(r.y[4107], 1e10f);
    EXPECT_EQ(r.y[4109], 3e38f);
    EXPECT_EQ(r.y[4111], inf);
    EXPECT_TRUE(std::isnan(r.y[4113]) && std::isnan(r.dx[4113])) << "NaN in, NaN out";
    for (size_t i = 4096; i <= 4108; ++i) EXPECT_TRUE(std::isfinite(r.dx[i])) << x[i];
  }
  if (builds.size() == 3) {
    const Result& native = builds[0].second;
    const Result& avx2 = builds[1].second;
    size_t differ = 0;
    for (size_t i = 0; i < n; ++i)
      differ += !same_bits(native.y[i], avx2.y[i]) + !same_bits(native.dx[i], avx2.dx[i]);
    EXPECT_EQ(differ, 0u) << "the AVX2 build's values against the native build's";
  }
}

struct LnCase {
  const char* name;
  LayerNormShape s;
};
// Column sums run in blocks of 32 columns: a tail narrower than one, whole blocks, and both.
const LnCase kLnCases[] = {
    {"one", {1, 1}}, {"odd", {5, 7}}, {"gpt_small", {6, 64}}, {"blocks_and_tail", {9, 80}}};
class LayerNormCase : public ::testing::TestWithParam<LnCase> {};

TEST_P(LayerNormCase, UnitGammaZeroBetaGivesMeanZeroVarianceOnePerRow) {
  const LayerNormShape s = GetParam().s;
  auto x = random_floats(size_t(s.rows) * s.dim, 4, -3.0f, 5.0f);
  std::vector<float> gamma(s.dim, 1.0f), beta(s.dim, 0.0f), y(x.size()), mean(s.rows), rstd(s.rows);
  layernorm_forward_cpu(s, x.data(), gamma.data(), beta.data(), y.data(), mean.data(), rstd.data());
  if (s.dim == 1) {  // one column: the row is its own mean, so every output is beta = 0
    for (float v : y) EXPECT_EQ(v, 0.0f);
    return;
  }
  for (int r = 0; r < s.rows; ++r) {
    double m = 0, v = 0, xm = 0, xv = 0;
    for (int j = 0; j < s.dim; ++j) m += y[size_t(r) * s.dim + j], xm += x[size_t(r) * s.dim + j];
    m /= s.dim, xm /= s.dim;
    for (int j = 0; j < s.dim; ++j) {
      v += std::pow(y[size_t(r) * s.dim + j] - m, 2);
      xv += std::pow(x[size_t(r) * s.dim + j] - xm, 2);
    }
    v /= s.dim, xv /= s.dim;
    EXPECT_NEAR(m, 0.0, 1e-6) << "row " << r;
    // Variance 1 up to eps: var(y) = var(x) / (var(x) + eps).
    EXPECT_NEAR(v, xv / (xv + kLayerNormEps), 1e-5) << "row " << r;
    EXPECT_NEAR(mean[r], xm, 1e-6);
    EXPECT_NEAR(rstd[r], 1.0 / std::sqrt(xv + kLayerNormEps), 1e-5 * rstd[r]);
  }
}

TEST_P(LayerNormCase, BackwardMatchesFiniteDifferencesAndAccumulates) {
  const LayerNormShape s = GetParam().s;
  auto x = random_floats(size_t(s.rows) * s.dim, 5, -2.0f, 2.0f);
  auto gamma = random_floats(s.dim, 6, 0.5f, 1.5f), beta = random_floats(s.dim, 7);
  const auto r = kernel_test::to_double(random_floats(x.size(), 8));
  const std::vector<float> rf(r.begin(), r.end());
  std::vector<float> y(x.size()), mean(s.rows), rstd(s.rows);
  auto objective = [&] {
    layernorm_forward_cpu(s, x.data(), gamma.data(), beta.data(), y.data(), mean.data(),
                          rstd.data());
    return kernel_test::dot(r, y.data(), y.size());
  };
  objective();
  const auto dg0 = random_floats(s.dim, 9), db0 = random_floats(s.dim, 10);
  std::vector<float> dx(x.size()), dgamma = dg0, dbeta = db0;
  layernorm_backward_cpu(s, x.data(), gamma.data(), mean.data(), rstd.data(), rf.data(), dx.data(),
                         dgamma.data(), dbeta.data());
  std::vector<float> dg(s.dim), db(s.dim);  // the accumulated part alone, for the check
  for (int j = 0; j < s.dim; ++j) dg[j] = dgamma[j] - dg0[j], db[j] = dbeta[j] - db0[j];
  const kernel_test::GradCheck check{.step = 1e-3};
  kernel_test::expect_gradient(x, dx, objective, check, "dx");
  kernel_test::expect_gradient(gamma, dg, objective, check, "dgamma");
  kernel_test::expect_gradient(beta, db, objective, check, "dbeta");
}

INSTANTIATE_TEST_SUITE_P(Shapes, LayerNormCase, ::testing::ValuesIn(kLnCases),
                         [](const auto& info) { return std::string(info.param.name); });

// Rows and column blocks spread over the threads, each computed alone: the same bits at any
// thread count, and dgamma / dbeta alone the bits they have beside each other and dx.
TEST(LayerNorm, SameBitsAtAnyThreadCountAndWithEitherGradientAlone) {
  if (!onednn_built()) GTEST_SKIP() << "a build without oneDNN has no OpenMP threads to compare";
  const LayerNormShape s{300, 112};
  const auto x = random_floats(size_t(s.rows) * s.dim, 21, -2.0f, 3.0f);
  const auto gamma = random_floats(s.dim, 22, 0.5f, 1.5f), beta = random_floats(s.dim, 23);
  const auto dy = random_floats(x.size(), 24), dg0 = random_floats(s.dim, 25);
  std::vector<float> y[2], mean[2], rstd[2], dx[2], dgamma[2], dbeta[2];
  for (int threads : {1, 2}) {
    onednn_set_threads(threads);
    const int i = threads - 1;
    y[i].resize(x.size()), mean[i].resize(s.rows), rstd[i].resize(s.rows), dx[i].resize(x.size());
    dgamma[i] = dg0, dbeta[i] = dg0;
    layernorm_forward_cpu(s, x.data(), gamma.data(), beta.data(), y[i].data(), mean[i].data(),
                          rstd[i].data());
    layernorm_backward_cpu(s, x.data(), gamma.data(), mean[i].data(), rstd[i].data(), dy.data(),
                           dx[i].data(), dgamma[i].data(), dbeta[i].data());
  }
  onednn_set_threads(1);
  EXPECT_EQ(y[0], y[1]);
  EXPECT_EQ(rstd[0], rstd[1]);
  EXPECT_EQ(dx[0], dx[1]);
  EXPECT_EQ(dgamma[0], dgamma[1]);
  EXPECT_EQ(dbeta[0], dbeta[1]);
  std::vector<float> only_gamma = dg0, only_beta = dg0;
  layernorm_backward_cpu(s, x.data(), gamma.data(), mean[0].data(), rstd[0].data(), dy.data(),
                         nullptr, only_gamma.data(), nullptr);
  layernorm_backward_cpu(s, x.data(), gamma.data(), mean[0].data(), rstd[0].data(), dy.data(),
                         nullptr, nullptr, only_beta.data());
  EXPECT_EQ(only_gamma, dgamma[0]);
  EXPECT_EQ(only_beta, dbeta[0]);
}

TEST(Embedding, ForwardAddsTokenAndPositionRows) {
  const EmbeddingShape s{.batch = 2, .seq = 3, .vocab = 5, .max_seq = 4, .dim = 2};
  const std::vector<int32_t> tok = {4, 0, 4, 1, 1, 3};
  const auto wte = random_floats(size_t(s.vocab) * s.dim, 11);
  const auto wpe = random_floats(size_t(s.max_seq) * s.dim, 12);
  std::vector<float> out(size_t(s.batch) * s.seq * s.dim);
  embedding_forward_cpu(s, tok.data(), wte.data(), wpe.data(), out.data());
  for (int b = 0; b < s.batch; ++b)
    for (int t = 0; t < s.seq; ++t)
      for (int j = 0; j < s.dim; ++j)
        EXPECT_EQ(out[(size_t(b) * s.seq + t) * s.dim + j],
                  wte[size_t(tok[b * s.seq + t]) * s.dim + j] + wpe[size_t(t) * s.dim + j]);
}

TEST(Embedding, BackwardScatterAddsRepeatedTokensAndMatchesFiniteDifferences) {
  const EmbeddingShape s{.batch = 3, .seq = 4, .vocab = 6, .max_seq = 5, .dim = 3};
  const std::vector<int32_t> tok = {1, 1, 5, 0, 2, 1, 1, 1, 5, 5, 0, 3};  // repeats, token 4 unused
  auto wte = random_floats(size_t(s.vocab) * s.dim, 13),
       wpe = random_floats(size_t(s.max_seq) * s.dim, 14);
  const auto r = kernel_test::to_double(random_floats(tok.size() * s.dim, 15));
  const std::vector<float> rf(r.begin(), r.end());
  std::vector<float> out(r.size());
  auto objective = [&] {
    embedding_forward_cpu(s, tok.data(), wte.data(), wpe.data(), out.data());
    return kernel_test::dot(r, out.data(), out.size());
  };
  std::vector<float> dwte(wte.size(), 0.0f), dwpe(wpe.size(), 0.0f);
  embedding_backward_cpu(s, tok.data(), rf.data(), dwte.data(), dwpe.data());
  kernel_test::expect_gradient(wte, dwte, objective, {}, "dwte");
  kernel_test::expect_gradient(wpe, dwpe, objective, {}, "dwpe");
  for (int j = 0; j < s.dim; ++j) {
    EXPECT_EQ(dwte[4 * s.dim + j], 0.0f) << "an unused token got a gradient";
    EXPECT_EQ(dwpe[4 * s.dim + j], 0.0f) << "a position past seq got a gradient";
  }
  // Accumulates: a second pass doubles the gradient.
  std::vector<float> twice = dwte;
  embedding_backward_cpu(s, tok.data(), rf.data(), twice.data(), nullptr);
  for (size_t i = 0; i < dwte.size(); ++i) EXPECT_FLOAT_EQ(twice[i], 2 * dwte[i]);
}

TEST(Embedding, RefusesTokensOutsideTheVocabularyAndBadShapes) {
  const EmbeddingShape s{.batch = 1, .seq = 2, .vocab = 4, .max_seq = 2, .dim = 1};
  const std::vector<int32_t> tok = {3, 4};
  std::vector<float> w(8), out(2);
  try {
    embedding_forward_cpu(s, tok.data(), w.data(), w.data(), out.data());
    FAIL() << "token 4 of a vocabulary of 4 was accepted";
  } catch (const std::out_of_range& e) {
    EXPECT_STREQ(e.what(), "embedding_forward_cpu: token 4 at row 0, position 1 is outside [0, 4)");
  }
  EXPECT_THROW(embedding_forward_cpu({1, 3, 4, 2, 1}, tok.data(), w.data(), w.data(), out.data()),
               std::invalid_argument);  // seq > max_seq
  EXPECT_THROW(embedding_backward_cpu({1, 2, 0, 2, 1}, tok.data(), w.data(), w.data(), w.data()),
               std::invalid_argument);
}

TEST(Residual, AddsInPlaceAndAccumulates) {
  const auto a = random_floats(100, 16), b = random_floats(100, 17);
  std::vector<float> y = a;
  residual_add_cpu(y.data(), b.data(), y.data(), y.size());
  for (size_t i = 0; i < y.size(); ++i) EXPECT_EQ(y[i], a[i] + b[i]);
  residual_accumulate_cpu(b.data(), y.data(), y.size());
  for (size_t i = 0; i < y.size(); ++i) EXPECT_EQ(y[i], (a[i] + b[i]) + b[i]);
}

// loss.h's fused softmax cross-entropy serves the language model unchanged: logits [B*T, 256],
// the next bytes as int32 labels [B*T], scale 1/(B*T) for the mean over every position.
TEST(CrossEntropyOverPositions, LossH_FitsByteLogitsOfEveryPosition) {
  const int positions = 2 * 5, vocab = 256;
  const auto logits = random_floats(size_t(positions) * vocab, 18, -3.0f, 3.0f);
  std::vector<int32_t> next(positions);
  for (int i = 0; i < positions; ++i) next[i] = (i * 37 + 11) % vocab;
  std::vector<float> dlogits(logits.size());
  const float scale = 1.0f / positions;
  const LossTotals t = softmax_cross_entropy_cpu(logits.data(), next.data(), nullptr, positions,
                                                 vocab, scale, dlogits.data());
  double want = 0;
  for (int i = 0; i < positions; ++i) {
    double m = -1e30, z = 0;
    for (int c = 0; c < vocab; ++c) m = std::max(m, double(logits[size_t(i) * vocab + c]));
    for (int c = 0; c < vocab; ++c) z += std::exp(logits[size_t(i) * vocab + c] - m);
    want += m + std::log(z) - logits[size_t(i) * vocab + next[i]];
    double row_sum = 0;
    for (int c = 0; c < vocab; ++c) row_sum += dlogits[size_t(i) * vocab + c];
    EXPECT_NEAR(row_sum, 0.0, 1e-6) << "softmax - onehot sums to 0 in every row";
  }
  EXPECT_NEAR(t.loss_sum, want, 1e-4 * want);
}

}  // namespace
}  // namespace lockstep::kernels
