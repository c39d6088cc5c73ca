// Causal multi-head attention (kernels/gpt/attention.h) on the CPU: forward against a
// double-precision loop over the packed qkv layout, the causal property (an output at position t
// does not move when anything after t changes), the saved probabilities, and the backward pass
// against finite differences of the forward kernel.
#include <gtest/gtest.h>

#include <cmath>
#include <ostream>
#include <stdexcept>
#include <vector>

#include "kernel_reference.h"
#include "kernels/gpt/attention.h"

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

// The textbook formula in double, straight from the packed layout.
std::vector<double> reference(const AttentionShape& s, const std::vector<float>& qkv) {
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

}  // namespace
}  // namespace lockstep::kernels
