// Lockstep's Winograd F(4x4, 3x3) convolution (kernels/conv/winograd.h) against the OpenBLAS layer,
// its oracle (conv2d_*_cpu on NHWC), every pass: the output, the input gradient, the weight and
// bias gradients (accumulated). Winograd rounds differently from the direct sums, so the
// comparison is to a fraction of the largest value (measured: 4.5e-6 of it for the CNN's second
// convolution; oneDNN's Winograd is about as far). Sizes that are not multiples of the 4x4 tile
// (edge tiles cut), channel counts that leave 16, 32 or 48 columns in a product block, a fused
// ReLU, batch 1 and batches that span several of the weight gradient's chunks of 16 images. Each
// in both builds this CPU runs (AVX-512 and AVX2: LOCKSTEP_CPU_ISA's cap, parallel.h), on blocked
// and on NHWC activations; within a build the two layouts give the same bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernel_reference.h"
#include "kernels/activation.h"
#include "kernels/conv/conv2d.h"
#include "kernels/conv/pool.h"
#include "kernels/conv/winograd.h"
#include "kernels/onednn/onednn.h"
#include "kernels/parallel.h"

namespace lockstep::kernels {
namespace {

using kernel_test::from_blocked16;
using kernel_test::random_floats;
using kernel_test::to_blocked16;

// max |got - want| / max |want|: the error as a share of the largest value.
double scaled_error(const std::vector<float>& got, const std::vector<float>& want) {
  double err = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    err = std::max(err, std::abs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::abs(static_cast<double>(want[i])));
  }
  return scale > 0 ? err / scale : err;
}
constexpr double kTolerance = 3e-5;

struct Case {
  const char* name;
  int n, h, w, c_in, c_out;
  bool relu;
};

const Case kCases[] = {
    {"cnn_second_layer", 20, 14, 14, 32, 64, false}, {"edge_tiles_cut", 3, 7, 9, 16, 48, false},
    {"relu_wide_out", 2, 6, 5, 48, 80, true},        {"one_row", 2, 1, 3, 32, 16, false},
    {"batch1_square", 1, 8, 8, 16, 16, false},       {"two_chunks_odd", 17, 5, 11, 16, 32, true},
};

// The builds this CPU runs, widest first.
std::vector<CpuIsa> builds_here() {
  std::vector<CpuIsa> out;
  if (__builtin_cpu_supports("avx512f")) out.push_back(CpuIsa::native);
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) out.push_back(CpuIsa::avx2);
  return out;
}
const char* build_name(CpuIsa isa) { return isa == CpuIsa::native ? "AVX-512" : "AVX2"; }

class Winograd : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    if (!winograd_fast()) GTEST_SKIP() << "no AVX-512 or AVX2 here (or LOCKSTEP_CPU_ISA=baseline)";
  }
  void TearDown() override { set_cpu_isa_cap(CpuIsa::native); }
};

struct Passes {
  std::vector<float> y, dx, dw, db;
};

TEST_P(Winograd, MatchesTheOpenBlasConvolution) {
  const Case& c = GetParam();
  Conv2dShape s{c.n, c.h, c.w, c.c_in, c.c_out};
  s.relu = c.relu;
  ASSERT_TRUE(winograd_supported(s));
  const size_t xs = size_t(c.n) * c.h * c.w * c.c_in, ys = size_t(c.n) * c.h * c.w * c.c_out;
  const size_t taps = 9 * size_t(c.c_in) * c.c_out;
  const auto x = random_floats(xs, 1), w = random_floats(taps, 2, -0.2f, 0.2f),
             b = random_floats(c.c_out, 3), dy = random_floats(ys, 4);

  std::vector<float> ws(conv2d_workspace_floats(s)), y(ys), dx(xs), dw_want(w.size(), 0.5f),
      db_want(c.c_out, 0.25f);
  conv2d_forward_cpu(s, x.data(), w.data(), b.data(), y.data(), ws.data());
  conv2d_backward_cpu(s, x.data(), w.data(), dy.data(), dx.data(), dw_want.data(), db_want.data(),
                      ws.data());
  if (c.relu) {
    EXPECT_GT(std::count(y.begin(), y.end(), 0.0f), 0) << "the ReLU cut nothing";
  }

  const auto xb = to_blocked16(x, c.n, c.h, c.w, c.c_in);
  const auto dyb = to_blocked16(dy, c.n, c.h, c.w, c.c_out);
  std::vector<Passes> runs;
  for (CpuIsa isa : builds_here()) {
    set_cpu_isa_cap(isa);
    for (bool blocked : {true, false}) {
      SCOPED_TRACE(std::string(build_name(isa)) + (blocked ? ", blocked" : ", NHWC"));
      Passes p{std::vector<float>(ys, 7.0f), std::vector<float>(xs, 7.0f),
               std::vector<float>(w.size(), 0.5f), std::vector<float>(c.c_out, 0.25f)};
      winograd_forward_cpu(s, (blocked ? xb : x).data(), w.data(), b.data(), p.y.data(), blocked);
      winograd_backward_cpu(s, (blocked ? xb : x).data(), w.data(), (blocked ? dyb : dy).data(),
                            p.dx.data(), p.dw.data(), p.db.data(), blocked);
      if (blocked) {
        p.y = from_blocked16(p.y, c.n, c.h, c.w, c.c_out);
        p.dx = from_blocked16(p.dx, c.n, c.h, c.w, c.c_in);
      }
      EXPECT_LT(scaled_error(p.y, y), kTolerance);
      EXPECT_LT(scaled_error(p.dx, dx), kTolerance);
      EXPECT_LT(scaled_error(p.dw, dw_want), kTolerance);  // both added to 0.5: accumulated
      EXPECT_LT(scaled_error(p.db, db_want), kTolerance);

      // Without the input gradient: the same weight and bias gradients, bit for bit.
      std::vector<float> dw2(w.size(), 0.5f), db2(c.c_out, 0.25f);
      winograd_backward_cpu(s, (blocked ? xb : x).data(), w.data(), (blocked ? dyb : dy).data(),
                            nullptr, dw2.data(), db2.data(), blocked);
      EXPECT_EQ(dw2, p.dw);
      EXPECT_EQ(db2, p.db);
      runs.push_back(std::move(p));
    }
  }
  // Within a build the two layouts run the same operations in the same order: the same bits.
  // (The builds contract multiply-adds differently: each is only within the tolerance.)
  for (size_t i = 1; i < runs.size(); i += 2) {
    SCOPED_TRACE("NHWC against blocked, run " + std::to_string(i));
    EXPECT_EQ(runs[i].y, runs[i - 1].y);
    EXPECT_EQ(runs[i].dx, runs[i - 1].dx);
    EXPECT_EQ(runs[i].dw, runs[i - 1].dw);
    EXPECT_EQ(runs[i].db, runs[i - 1].db);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, Winograd, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

// Every pass is the same bits at one thread and at two: the images split between the threads,
// the weight gradient summed per fixed chunk of 16 images and the chunks added in order.
TEST(WinogradThreads, SameBitsAtAnyThreadCount) {
  if (!winograd_fast()) GTEST_SKIP() << "no AVX-512 or AVX2 here (or LOCKSTEP_CPU_ISA=baseline)";
  if (!onednn_built()) GTEST_SKIP() << "a build without oneDNN has no OpenMP threads to compare";
  const Conv2dShape s{40, 14, 14, 32, 64};
  const size_t xs = size_t(40) * 14 * 14 * 32, ys = xs * 2;
  const auto x = random_floats(xs, 1), w = random_floats(9 * 32 * 64, 2, -0.2f, 0.2f),
             b = random_floats(64, 3), dy = random_floats(ys, 4);
  std::vector<float> y[2], dx[2], dw[2], db[2];
  for (int threads : {1, 2}) {
    onednn_set_threads(threads);
    const int i = threads - 1;
    y[i].resize(ys);
    dx[i].resize(xs);
    dw[i].assign(w.size(), 0.0f);
    db[i].assign(64, 0.0f);
    winograd_forward_cpu(s, x.data(), w.data(), b.data(), y[i].data());
    winograd_backward_cpu(s, x.data(), w.data(), dy.data(), dx[i].data(), dw[i].data(),
                          db[i].data());
  }
  onednn_set_threads(1);
  EXPECT_EQ(y[0], y[1]);
  EXPECT_EQ(dx[0], dx[1]);
  EXPECT_EQ(dw[0], dw[1]);
  EXPECT_EQ(db[0], db[1]);
}

// The convolution with the 2x2 max-pool (and the ReLU after it) fused gives what the layers ran
// before it, bit for bit: the convolution, then the pool (NHWC: the pool, then a ReLU layer;
// blocked: the pool with its fused ReLU), and the backward passes in reverse - the pooled output,
// the input gradient, the weight and bias gradients. Ties on purpose: output channels 0 and 1
// have zero weights (every window ties at the bias; channel 0's is negative, so the ReLU cuts
// it), and some pooled gradients are -0. Odd sizes
// drop a trailing row or column; batch 17 spans two of the weight gradient's chunks.
struct PoolCase {
  const char* name;
  int n, h, w, c_in, c_out;
};
const PoolCase kPoolCases[] = {{"cnn_second_layer", 6, 14, 14, 32, 64},
                               {"odd_sizes", 3, 7, 9, 16, 48},
                               {"one_window", 2, 2, 3, 16, 16},
                               {"two_chunks", 17, 5, 6, 16, 32}};

class WinogradPool : public ::testing::TestWithParam<PoolCase> {
 protected:
  void SetUp() override {
    if (!winograd_fast()) GTEST_SKIP() << "no AVX-512 or AVX2 here (or LOCKSTEP_CPU_ISA=baseline)";
  }
  void TearDown() override { set_cpu_isa_cap(CpuIsa::native); }
};

TEST_P(WinogradPool, SameBitsAsTheConvolutionThenThePool) {
  const PoolCase& c = GetParam();
  const Conv2dShape s{c.n, c.h, c.w, c.c_in, c.c_out};
  const PoolShape ps{c.n, c.h, c.w, c.c_out, 2};
  const size_t xs = size_t(c.n) * c.h * c.w * c.c_in, ys = size_t(c.n) * c.h * c.w * c.c_out;
  const size_t pooled = size_t(c.n) * ps.out_h() * ps.out_w() * c.c_out;
  const auto x = random_floats(xs, 1);
  auto w = random_floats(9 * size_t(c.c_in) * c.c_out, 2, -0.2f, 0.2f);
  auto b = random_floats(c.c_out, 3);
  auto dy = random_floats(pooled, 4);
  for (size_t i = 0; i < w.size(); i += c.c_out) w[i] = w[i + 1] = 0.0f;
  b[0] = -0.5f;
  b[1] = 0.5f;
  for (size_t i = 0; i < pooled; i += 7) dy[i] = -0.0f;
  const auto xb = to_blocked16(x, c.n, c.h, c.w, c.c_in);

  for (CpuIsa isa : builds_here()) {
    set_cpu_isa_cap(isa);
    for (bool blocked : {true, false})
      for (bool pooled_blocked : {true, false})
        for (bool relu : {true, false}) {
          if (!blocked && pooled_blocked) continue;  // the NHWC pool writes NHWC only
          SCOPED_TRACE(std::string(build_name(isa)) + (blocked ? ", blocked" : ", NHWC") +
                       (pooled_blocked ? ", pooled blocked" : "") + (relu ? ", ReLU" : ""));
          const float* xin = (blocked ? xb : x).data();
          // What the layers ran unfused.
          std::vector<float> y(ys), want_y(pooled), full_dy(ys), want_dx(xs, 7.0f),
              want_dw(w.size(), 0.5f), want_db(c.c_out, 0.25f);
          std::vector<int32_t> arg(pooled);
          winograd_forward_cpu(s, xin, w.data(), b.data(), y.data(), blocked);
          if (blocked) {
            maxpool_forward_blocked16_cpu(ps, y.data(), want_y.data(), arg.data(), pooled_blocked,
                                          relu);
            maxpool_backward_blocked16_cpu(ps, dy.data(), arg.data(), full_dy.data(),
                                           pooled_blocked);
          } else {
            maxpool_forward_cpu(ps, y.data(), want_y.data(), arg.data());
            std::vector<float> g = dy;
            if (relu) {
              relu_forward_cpu(want_y.data(), want_y.data(), pooled);
              relu_backward_cpu(want_y.data(), dy.data(), g.data(), pooled);
            }
            maxpool_backward_cpu(ps, g.data(), arg.data(), full_dy.data());
          }
          winograd_backward_cpu(s, xin, w.data(), full_dy.data(), want_dx.data(), want_dw.data(),
                                want_db.data(), blocked);
          // Fused.
          std::vector<float> got_y(pooled, 7.0f), got_dx(xs, 7.0f), got_dw(w.size(), 0.5f),
              got_db(c.c_out, 0.25f);
          std::vector<int8_t> taps(pooled, 9);
          winograd_pool_forward_cpu(s, xin, w.data(), b.data(), got_y.data(), taps.data(), relu,
                                    blocked, pooled_blocked);
          winograd_pool_backward_cpu(s, xin, w.data(), dy.data(), taps.data(), got_dx.data(),
                                     got_dw.data(), got_db.data(), blocked, pooled_blocked);
          EXPECT_EQ(got_y, want_y);
          EXPECT_EQ(got_dx, want_dx);
          EXPECT_EQ(got_dw, want_dw);
          EXPECT_EQ(got_db, want_db);
          // Every tap is one of the window's four, or -1 where the ReLU cut; channel 0's ties
          // went to the first tap or, under the ReLU, to none.
          for (int8_t t : taps) ASSERT_TRUE(t >= -1 && t <= 3) << static_cast<int>(t);
          EXPECT_EQ(relu ? -1 : 0,
                    static_cast<int>(taps[0]));  // channel 0 of the first position, either layout
          // Without the input gradient: the same weight and bias gradients.
          std::vector<float> dw2(w.size(), 0.5f), db2(c.c_out, 0.25f);
          winograd_pool_backward_cpu(s, xin, w.data(), dy.data(), taps.data(), nullptr, dw2.data(),
                                     db2.data(), blocked, pooled_blocked);
          EXPECT_EQ(dw2, got_dw);
          EXPECT_EQ(db2, got_db);
        }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, WinogradPool, ::testing::ValuesIn(kPoolCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(WinogradPoolThreads, SameBitsAtAnyThreadCount) {
  if (!winograd_fast()) GTEST_SKIP() << "no AVX-512 or AVX2 here (or LOCKSTEP_CPU_ISA=baseline)";
  if (!onednn_built()) GTEST_SKIP() << "a build without oneDNN has no OpenMP threads to compare";
  const Conv2dShape s{40, 14, 14, 32, 64};
  const size_t xs = size_t(40) * 14 * 14 * 32, pooled = size_t(40) * 7 * 7 * 64;
  const auto x = random_floats(xs, 1), w = random_floats(9 * 32 * 64, 2, -0.2f, 0.2f),
             b = random_floats(64, 3), dy = random_floats(pooled, 4);
  std::vector<float> y[2], dx[2], dw[2], db[2];
  std::vector<int8_t> taps[2];
  for (int threads : {1, 2}) {
    onednn_set_threads(threads);
    const int i = threads - 1;
    y[i].resize(pooled);
    taps[i].resize(pooled);
    dx[i].resize(xs);
    dw[i].assign(w.size(), 0.0f);
    db[i].assign(64, 0.0f);
    winograd_pool_forward_cpu(s, x.data(), w.data(), b.data(), y[i].data(), taps[i].data(), true,
                              true, false);
    winograd_pool_backward_cpu(s, x.data(), w.data(), dy.data(), taps[i].data(), dx[i].data(),
                               dw[i].data(), db[i].data(), true, false);
  }
  onednn_set_threads(1);
  EXPECT_EQ(y[0], y[1]);
  EXPECT_EQ(taps[0], taps[1]);
  EXPECT_EQ(dx[0], dx[1]);
  EXPECT_EQ(dw[0], dw[1]);
  EXPECT_EQ(db[0], db[1]);
}

TEST(WinogradPoolShapes, RefusesWhatItDoesNotCompute) {
  std::vector<float> v(1 << 16);
  std::vector<int8_t> a(1 << 14);
  Conv2dShape relu_before{2, 8, 8, 16, 32};
  relu_before.relu = true;
  const Conv2dShape one_row{2, 1, 8, 16, 32}, c_in8{2, 8, 8, 8, 32};
  for (const Conv2dShape& bad : {relu_before, one_row, c_in8}) {
    EXPECT_THROW(winograd_pool_forward_cpu(bad, v.data(), v.data(), v.data(), v.data(), a.data(),
                                           false, true, false),
                 std::invalid_argument);
    EXPECT_THROW(winograd_pool_backward_cpu(bad, v.data(), v.data(), v.data(), a.data(), v.data(),
                                            v.data(), v.data(), true, false),
                 std::invalid_argument);
  }
}

// Layers take it for small images only (one image's transforms within 1 MiB), where it was
// measured; anything it does not support is never preferred.
TEST(WinogradShapes, PreferredForSmallImagesOnly) {
  if (!winograd_fast()) GTEST_SKIP() << "no AVX-512 or AVX2 here (or LOCKSTEP_CPU_ISA=baseline)";
  EXPECT_TRUE(winograd_preferred({64, 14, 14, 32, 64}));  // the CNN's second convolution
  EXPECT_TRUE(winograd_preferred({64, 28, 28, 32, 32}));
  EXPECT_FALSE(winograd_preferred({64, 56, 56, 64, 64}));
  EXPECT_FALSE(winograd_preferred({64, 14, 14, 8, 64}));
}

TEST(WinogradShapes, RefusesWhatItDoesNotCompute) {
  const Conv2dShape ok{2, 8, 8, 16, 32};
  EXPECT_TRUE(winograd_supported(ok));
  Conv2dShape c_in8 = ok, c_out24 = ok, stride2 = ok, k5 = ok, no_pad = ok;
  c_in8.c_in = 8;
  c_out24.c_out = 24;
  stride2.stride = 2;
  k5.kh = k5.kw = 5;
  k5.pad_h = k5.pad_w = 2;
  no_pad.pad_h = no_pad.pad_w = 0;
  for (const Conv2dShape& bad : {c_in8, c_out24, stride2, k5, no_pad}) {
    EXPECT_FALSE(winograd_supported(bad));
    std::vector<float> v(4096);
    EXPECT_THROW(winograd_forward_cpu(bad, v.data(), v.data(), v.data(), v.data()),
                 std::invalid_argument);
    EXPECT_THROW(
        winograd_backward_cpu(bad, v.data(), v.data(), v.data(), v.data(), v.data(), v.data()),
        std::invalid_argument);
  }
}

}  // namespace
}  // namespace lockstep::kernels
