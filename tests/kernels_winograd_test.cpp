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
#include "kernels/conv/conv2d.h"
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
