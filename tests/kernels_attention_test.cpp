// Causal multi-head attention on the CPU, materialised (kernels/gpt/attention.h) and flash-style
// (kernels/gpt/attention_flash_cpu.h, in each vector build this CPU has): forward against a
// double-precision loop over the packed qkv layout, the causal property (an output at position t
// does not move when anything after t changes), the saved probabilities or log-sum-exps, and the
// backward pass against finite differences of the forward kernel (and the flash one against the
// materialised one), across tile edges.
#include <gtest/gtest.h>

#include <cmath>
#include <ostream>
#include <stdexcept>
#include <vector>

#include "kernel_reference.h"
#include "kernels/gpt/attention.h"
#include "kernels/gpt/attention_flash_cpu.h"
#include "kernels/onednn/onednn.h"
#include "kernels/parallel.h"

namespace lockstep::kernels {
namespace {

using kernel_test::max_rel_error;
using kernel_test::random_floats;

struct Case {
  const char* name;
  AttentionShape s;
};
const Case kCases[] = {
    {"one_position", {1, 1, 1, 1}},
    {"odd", {2, 5, 3, 2}},
    {"gpt_tiny", {2, 16, 4, 8}},
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

// Index of q (part 0), k (1) or v (2), head h, element d at (b, t) of the packed qkv.
size_t at(const AttentionShape& s, int b, int t, int part, int h, int d) {
  const int C = s.channels();
  return (size_t(b) * s.seq + t) * 3 * C + part * C + h * s.head_dim + d;
}

// The textbook formula in double, straight from the packed layout; also each row's log-sum-exp of
// its scaled scores, [B, H, T], where `lse` is given.
std::vector<double> reference(const AttentionShape& s, const std::vector<float>& qkv,
                              std::vector<double>* lse = nullptr) {
  const int C = s.channels();
  std::vector<double> out(size_t(s.batch) * s.seq * C);
  for (int b = 0; b < s.batch; ++b)
    for (int h = 0; h < s.heads; ++h)
      for (int t = 0; t < s.seq; ++t) {
        std::vector<double> w(t + 1);
        double m = -1e300, z = 0;
        for (int u = 0; u <= t; ++u) {
          double dot = 0;
          for (int d = 0; d < s.head_dim; ++d)
            dot += double(qkv[at(s, b, t, 0, h, d)]) * qkv[at(s, b, u, 1, h, d)];
          w[u] = dot / std::sqrt(double(s.head_dim));
          m = std::max(m, w[u]);
        }
        for (double& x : w) z += (x = std::exp(x - m));
        if (lse != nullptr) {
          lse->resize(size_t(s.batch) * s.heads * s.seq);
          (*lse)[(size_t(b) * s.heads + h) * s.seq + t] = m + std::log(z);
        }
        for (int d = 0; d < s.head_dim; ++d) {
          double acc = 0;
          for (int u = 0; u <= t; ++u) acc += w[u] / z * qkv[at(s, b, u, 2, h, d)];
          out[(size_t(b) * s.seq + t) * C + h * s.head_dim + d] = acc;
        }
      }
  return out;
}

struct Buffers {
  explicit Buffers(const AttentionShape& s)
      : out(size_t(s.batch) * s.seq * s.channels()),
        heads(attention_heads_floats(s)),
        probs(attention_probs_floats(s)),
        work(attention_workspace_floats(s)) {}
  std::vector<float> out, heads, probs, work;
};

class AttentionCase : public ::testing::TestWithParam<Case> {};

TEST_P(AttentionCase, ForwardMatchesReferenceAndSavesCausalProbabilities) {
  const AttentionShape s = GetParam().s;
  const auto qkv = random_floats(size_t(s.batch) * s.seq * 3 * s.channels(), 1, -2.0f, 2.0f);
  Buffers buf(s);
  attention_forward_cpu(s, qkv.data(), buf.out.data(), buf.heads.data(), buf.probs.data(),
                        buf.work.data());
  EXPECT_LT(max_rel_error(buf.out, reference(s, qkv)), 1e-5);
  const int T = s.seq;
  for (size_t row = 0; row < size_t(s.batch) * s.heads * T; ++row) {
    const int t = static_cast<int>(row % T);
    double sum = 0;
    for (int u = 0; u < T; ++u) {
      const float p = buf.probs[row * T + u];
      if (u > t) {
        EXPECT_EQ(p, 0.0f) << "row " << row << " attends to the future position " << u;
      }
      sum += p;
    }
    EXPECT_NEAR(sum, 1.0, 1e-6) << "row " << row;
  }
}

// Changing q, k and v of positions after t (every head, every batch entry) leaves the outputs at
// positions <= t bit for bit as they were; the output at the changed positions does move.
TEST_P(AttentionCase, OutputAtTDependsOnlyOnPositionsUpToT) {
  const AttentionShape s = GetParam().s;
  if (s.seq < 2) GTEST_SKIP() << "one position: no future to change";
  const auto qkv = random_floats(size_t(s.batch) * s.seq * 3 * s.channels(), 2);
  Buffers before(s), after(s);
  attention_forward_cpu(s, qkv.data(), before.out.data(), before.heads.data(), before.probs.data(),
                        before.work.data());
  const int C = s.channels();
  for (int t = 0; t + 1 < s.seq; ++t) {
    auto changed = qkv;
    for (int b = 0; b < s.batch; ++b)
      for (int u = t + 1; u < s.seq; ++u)
        for (int j = 0; j < 3 * C; ++j) changed[(size_t(b) * s.seq + u) * 3 * C + j] += 0.75f;
    attention_forward_cpu(s, changed.data(), after.out.data(), after.heads.data(),
                          after.probs.data(), after.work.data());
    bool later_moved = false;
    for (int b = 0; b < s.batch; ++b)
      for (int u = 0; u < s.seq; ++u)
        for (int j = 0; j < C; ++j) {
          const size_t i = (size_t(b) * s.seq + u) * C + j;
          if (u <= t)
            ASSERT_EQ(after.out[i], before.out[i])
                << "position " << u << " saw a change at > " << t;
          else
            later_moved |= after.out[i] != before.out[i];
        }
    EXPECT_TRUE(later_moved) << "changing positions > " << t << " changed no output";
  }
}

TEST_P(AttentionCase, BackwardMatchesFiniteDifferences) {
  const AttentionShape s = GetParam().s;
  auto qkv = random_floats(size_t(s.batch) * s.seq * 3 * s.channels(), 3);
  const auto r = kernel_test::to_double(random_floats(size_t(s.batch) * s.seq * s.channels(), 4));
  const std::vector<float> rf(r.begin(), r.end());
  Buffers buf(s);
  auto objective = [&] {
    attention_forward_cpu(s, qkv.data(), buf.out.data(), buf.heads.data(), buf.probs.data(),
                          buf.work.data());
    return kernel_test::dot(r, buf.out.data(), buf.out.size());
  };
  objective();
  std::vector<float> dqkv(qkv.size(), std::nanf(""));  // overwritten
  attention_backward_cpu(s, rf.data(), buf.heads.data(), buf.probs.data(), dqkv.data(),
                         buf.work.data());
  kernel_test::expect_gradient(qkv, dqkv, objective, {.step = 1e-3, .samples = 96}, "dqkv");
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionCase, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

// At a single position attention is the identity on v: softmax over one score is 1.
TEST(Attention, OnePositionPassesVThrough) {
  const AttentionShape s{3, 1, 2, 4};
  const auto qkv = random_floats(size_t(s.batch) * 3 * s.channels(), 5, -5.0f, 5.0f);
  Buffers buf(s);
  attention_forward_cpu(s, qkv.data(), buf.out.data(), buf.heads.data(), buf.probs.data(),
                        buf.work.data());
  for (int b = 0; b < s.batch; ++b)
    for (int j = 0; j < s.channels(); ++j)
      EXPECT_EQ(buf.out[size_t(b) * s.channels() + j],
                qkv[size_t(b) * 3 * s.channels() + 2 * s.channels() + j]);
}

TEST(Attention, RejectsBadShapes) {
  EXPECT_THROW(attention_forward_cpu({1, 0, 2, 2}, nullptr, nullptr, nullptr, nullptr, nullptr),
               std::invalid_argument);
  EXPECT_THROW(attention_backward_cpu({-1, 2, 2, 2}, nullptr, nullptr, nullptr, nullptr, nullptr),
               std::invalid_argument);
  EXPECT_EQ(attention_workspace_floats({2, 3, 4, 5}), size_t(4 * 2 * 3 * 20 + 2 * 4 * 3 * 3));
}

// The flash-style kernels, in every vector build this CPU can run (the cap of LOCKSTEP_CPU_ISA
// set in turn), on shapes that cross the 32-position tiles (and the 64 ones of an earlier tile
// size) and the head widths GPT models use.
const Case kFlashCases[] = {
    {"one_position", {2, 1, 1, 16}},  {"partial_tile", {2, 37, 2, 16}},
    {"one_tile", {1, 64, 2, 32}},     {"tile_edge", {2, 65, 1, 48}},
    {"three_tiles", {1, 150, 3, 32}}, {"gpt_small_heads", {1, 70, 2, 64}},
    {"wide", {1, 96, 1, 128}},
};

struct IsaBuild {
  const char* name;
  CpuIsa cap;
  bool runs;
};
std::vector<IsaBuild> isa_builds() {
  return {{"native", CpuIsa::native, true},
          {"avx2", CpuIsa::avx2, __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")},
          {"baseline", CpuIsa::baseline, true}};
}

class FlashAttentionCpu : public ::testing::TestWithParam<Case> {
 protected:
  void TearDown() override { set_cpu_isa_cap(CpuIsa::native); }
};

TEST_P(FlashAttentionCpu, EveryBuildMatchesTheReferenceAndTheMaterialisedBackward) {
  const AttentionShape s = GetParam().s;
  ASSERT_TRUE(attention_flash_cpu_supported(s));
  const size_t n = size_t(s.batch) * s.seq * s.channels();
  const auto qkv = random_floats(3 * n, 11, -2.0f, 2.0f);
  const auto dout = random_floats(n, 12);
  std::vector<double> want_lse;
  const auto want = reference(s, qkv, &want_lse);
  Buffers mat(s);
  std::vector<float> want_dqkv(3 * n);
  attention_forward_cpu(s, qkv.data(), mat.out.data(), mat.heads.data(), mat.probs.data(),
                        mat.work.data());
  attention_backward_cpu(s, dout.data(), mat.heads.data(), mat.probs.data(), want_dqkv.data(),
                         mat.work.data());
  for (const IsaBuild& isa : isa_builds()) {
    if (!isa.runs) continue;
    SCOPED_TRACE(isa.name);
    set_cpu_isa_cap(isa.cap);
    std::vector<float> out(n, std::nanf("")), lse(attention_flash_cpu_lse_floats(s), std::nanf(""));
    std::vector<float> dqkv(3 * n, std::nanf(""));  // overwritten
    attention_flash_forward_cpu(s, qkv.data(), out.data(), lse.data());
    EXPECT_LT(max_rel_error(out, want), 2e-5);
    double worst = 0;
    for (size_t i = 0; i < lse.size(); ++i) worst = std::max(worst, std::abs(lse[i] - want_lse[i]));
    EXPECT_LT(worst, 1e-5) << "log-sum-exp";
    attention_flash_backward_cpu(s, qkv.data(), out.data(), dout.data(), lse.data(), dqkv.data());
    EXPECT_LT(max_rel_error(dqkv, want_dqkv), 2e-5);
  }
}

TEST_P(FlashAttentionCpu, BackwardMatchesFiniteDifferences) {
  const AttentionShape s = GetParam().s;
  auto qkv = random_floats(size_t(s.batch) * s.seq * 3 * s.channels(), 13);
  const size_t n = size_t(s.batch) * s.seq * s.channels();
  const auto r = kernel_test::to_double(random_floats(n, 14));
  const std::vector<float> rf(r.begin(), r.end());
  std::vector<float> out(n), lse(attention_flash_cpu_lse_floats(s));
  auto objective = [&] {
    attention_flash_forward_cpu(s, qkv.data(), out.data(), lse.data());
    return kernel_test::dot(r, out.data(), out.size());
  };
  objective();
  std::vector<float> dqkv(qkv.size(), std::nanf(""));
  attention_flash_backward_cpu(s, qkv.data(), out.data(), rf.data(), lse.data(), dqkv.data());
  kernel_test::expect_gradient(qkv, dqkv, objective, {.step = 1e-3, .samples = 48}, "dqkv");
}

// Changing q, k and v after position t, in one tile or the next, leaves every output at or
// before t bit for bit as it was: masked keys get exactly zero weight.
TEST_P(FlashAttentionCpu, OutputAtTDependsOnlyOnPositionsUpToT) {
  const AttentionShape s = GetParam().s;
  if (s.seq < 2) GTEST_SKIP() << "one position: no future to change";
  const size_t n = size_t(s.batch) * s.seq * s.channels();
  const auto qkv = random_floats(3 * n, 15);
  std::vector<float> before(n), after(n), lse(attention_flash_cpu_lse_floats(s));
  attention_flash_forward_cpu(s, qkv.data(), before.data(), lse.data());
  const int C = s.channels();
  for (int t : {0, 30, 31, 32, s.seq / 2, 62, 63, 64, s.seq - 2}) {
    if (t < 0 || t + 1 >= s.seq) continue;
    auto changed = qkv;
    for (int b = 0; b < s.batch; ++b)
      for (int u = t + 1; u < s.seq; ++u)
        for (int j = 0; j < 3 * C; ++j) changed[(size_t(b) * s.seq + u) * 3 * C + j] += 0.75f;
    attention_flash_forward_cpu(s, changed.data(), after.data(), lse.data());
    for (int b = 0; b < s.batch; ++b)
      for (int u = 0; u <= t; ++u)
        for (int j = 0; j < C; ++j) {
          const size_t i = (size_t(b) * s.seq + u) * C + j;
          ASSERT_EQ(after[i], before[i]) << "position " << u << " saw a change at > " << t;
        }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, FlashAttentionCpu, ::testing::ValuesIn(kFlashCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(FlashAttentionCpuThreads, SameBitsAtAnyThreadCount) {
  if (!onednn_built()) GTEST_SKIP() << "a build without oneDNN has no OpenMP threads to compare";
  const AttentionShape s{3, 130, 4, 32};
  const size_t n = size_t(s.batch) * s.seq * s.channels();
  const auto qkv = random_floats(3 * n, 16), dout = random_floats(n, 17);
  std::vector<float> out[2], lse[2], dqkv[2];
  for (int threads : {1, 2}) {
    onednn_set_threads(threads);
    const int i = threads - 1;
    out[i].resize(n);
    lse[i].resize(attention_flash_cpu_lse_floats(s));
    dqkv[i].resize(3 * n);
    attention_flash_forward_cpu(s, qkv.data(), out[i].data(), lse[i].data());
    attention_flash_backward_cpu(s, qkv.data(), out[i].data(), dout.data(), lse[i].data(),
                                 dqkv[i].data());
  }
  onednn_set_threads(1);
  EXPECT_EQ(out[0], out[1]);
  EXPECT_EQ(lse[0], lse[1]);
  EXPECT_EQ(dqkv[0], dqkv[1]);
}

TEST(FlashAttentionCpuShapes, RefusesHeadWidthsItDoesNotCompute) {
  EXPECT_TRUE(attention_flash_cpu_supported({1, 8, 2, 16}));
  EXPECT_TRUE(attention_flash_cpu_supported({1, 8, 2, 64}));
  EXPECT_FALSE(attention_flash_cpu_supported({1, 8, 2, 8}));
  EXPECT_FALSE(attention_flash_cpu_supported({1, 8, 2, 24}));
  EXPECT_EQ(attention_flash_cpu_lse_floats({2, 3, 4, 16}), size_t(2 * 3 * 4));
  try {
    attention_flash_forward_cpu({1, 4, 2, 24}, nullptr, nullptr, nullptr);
    ADD_FAILURE() << "head_dim 24 was taken";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("multiple of 16, not 24"), std::string::npos) << e.what();
  }
  EXPECT_THROW(
      attention_flash_backward_cpu({1, 0, 2, 16}, nullptr, nullptr, nullptr, nullptr, nullptr),
      std::invalid_argument);
}

}  // namespace
}  // namespace lockstep::kernels
