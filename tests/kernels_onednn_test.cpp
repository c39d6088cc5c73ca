// The oneDNN twins (conv2d_*_onednn, gemm_onednn and gemm_bf16_onednn, dense_*_onednn) against the
// OpenBLAS kernels (*_cpu), their oracle: the same shapes (odd sizes, stride 2, batch 1, one input
// channel as in the CNN's first layer), the same accumulate contract, and a second call with the
// same shape (the cached primitives) reading the new data. Skips where the build has no oneDNN.
#include <gtest/gtest.h>

#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernel_reference.h"
#include "kernels/cast.h"
#include "kernels/conv/conv2d.h"
#include "kernels/dense.h"
#include "kernels/gemm.h"
#include "kernels/onednn/onednn.h"

namespace lockstep::kernels {
namespace {

using kernel_test::max_rel_error;
using kernel_test::random_floats;

// Both twins sum in float in different orders, over up to 64 x 28 x 28 terms (conv1's bias
// gradient); the bound is the GPU parity tests' for gemm-based ops (kernels_parity_gpu_test.cpp).
// 1e-5 held on an AVX2 machine and failed at 2e-5 on an AVX-512 one, where both libraries block
// their sums differently.
constexpr double kTolerance = 1e-4;

#define SKIP_WITHOUT_ONEDNN()                                                                   \
  if (!onednn_built())                                                                          \
  GTEST_SKIP() << "this build has no oneDNN (LOCKSTEP_ONEDNN=OFF or libdnnl-dev missing): the " \
                  "CPU layers run on OpenBLAS alone"

struct ConvCase {
  const char* name;
  Conv2dShape s;
};

void PrintTo(const ConvCase& c, std::ostream* os) { *os << c.name; }

Conv2dShape conv(int n, int h, int w, int c_in, int c_out, int k, int stride, int pad) {
  return {n, h, w, c_in, c_out, k, k, stride, pad, pad};
}

const ConvCase kConvCases[] = {
    {"cnn_conv1", conv(3, 28, 28, 1, 32, 3, 1, 1)},
    {"cnn_conv2", conv(2, 14, 14, 32, 64, 3, 1, 1)},
    {"batch1_odd", conv(1, 7, 5, 3, 5, 3, 1, 1)},
    {"stride2", conv(2, 9, 9, 4, 6, 3, 2, 1)},
    {"k5_stride2_odd", conv(2, 11, 13, 2, 3, 5, 2, 2)},
    {"no_padding", conv(2, 6, 7, 8, 16, 3, 1, 0)},
    {"stride3_drops_edge", conv(1, 10, 11, 3, 4, 3, 3, 0)},
};

size_t x_size(const Conv2dShape& s) { return static_cast<size_t>(s.n) * s.h * s.w * s.c_in; }
size_t w_size(const Conv2dShape& s) { return static_cast<size_t>(s.kh) * s.kw * s.c_in * s.c_out; }
size_t y_size(const Conv2dShape& s) {
  return static_cast<size_t>(s.n) * s.out_h() * s.out_w() * s.c_out;
}

class OnednnConv : public ::testing::TestWithParam<ConvCase> {};

TEST_P(OnednnConv, ForwardMatchesOpenBlas) {
  SKIP_WITHOUT_ONEDNN();
  const Conv2dShape s = GetParam().s;
  std::vector<float> w = random_floats(w_size(s), 2), b = random_floats(s.c_out, 3);
  std::vector<float> ws(conv2d_workspace_floats(s)), want(y_size(s)), got(y_size(s), 7.0f);
  for (uint32_t seed : {1u, 11u}) {  // the second call runs the cached primitives on new data
    std::vector<float> x = random_floats(x_size(s), seed);
    conv2d_forward_cpu(s, x.data(), w.data(), b.data(), want.data(), ws.data());
    conv2d_forward_onednn(s, x.data(), w.data(), b.data(), got.data());
    EXPECT_LT(max_rel_error(got, want), kTolerance) << "input seed " << seed;
  }
  std::vector<float> x = random_floats(x_size(s), 4);
  conv2d_forward_cpu(s, x.data(), w.data(), nullptr, want.data(), ws.data());
  conv2d_forward_onednn(s, x.data(), w.data(), nullptr, got.data());
  EXPECT_LT(max_rel_error(got, want), kTolerance) << "without bias";
}

TEST_P(OnednnConv, BackwardMatchesOpenBlasAndAccumulates) {
  SKIP_WITHOUT_ONEDNN();
  const Conv2dShape s = GetParam().s;
  const std::vector<float> x = random_floats(x_size(s), 5), w = random_floats(w_size(s), 6);
  std::vector<float> ws(conv2d_workspace_floats(s));
  for (uint32_t seed : {7u, 17u}) {
    const std::vector<float> dy = random_floats(y_size(s), seed);
    // Gradients start from earlier values: both twins must add to them.
    std::vector<float> dx_want(x_size(s)), dw_want = random_floats(w_size(s), 8),
                                           db_want = random_floats(s.c_out, 9);
    std::vector<float> dx_got(x_size(s), 3.0f), dw_got = dw_want, db_got = db_want;
    conv2d_backward_cpu(s, x.data(), w.data(), dy.data(), dx_want.data(), dw_want.data(),
                        db_want.data(), ws.data());
    conv2d_backward_onednn(s, x.data(), w.data(), dy.data(), dx_got.data(), dw_got.data(),
                           db_got.data());
    EXPECT_LT(max_rel_error(dx_got, dx_want), kTolerance) << "dx, dy seed " << seed;
    EXPECT_LT(max_rel_error(dw_got, dw_want), kTolerance) << "dw, dy seed " << seed;
    EXPECT_LT(max_rel_error(db_got, db_want), kTolerance) << "db, dy seed " << seed;
  }
}

TEST_P(OnednnConv, BackwardSkipsWhatIsNull) {
  SKIP_WITHOUT_ONEDNN();
  const Conv2dShape s = GetParam().s;
  const std::vector<float> x = random_floats(x_size(s), 10), w = random_floats(w_size(s), 11),
                           dy = random_floats(y_size(s), 12);
  std::vector<float> ws(conv2d_workspace_floats(s));
  // The first layer: no dx.
  std::vector<float> dw_want(w_size(s), 0.5f), db_want(s.c_out, 0.5f);
  std::vector<float> dw_got = dw_want, db_got = db_want;
  conv2d_backward_cpu(s, x.data(), w.data(), dy.data(), nullptr, dw_want.data(), db_want.data(),
                      ws.data());
  conv2d_backward_onednn(s, x.data(), w.data(), dy.data(), nullptr, dw_got.data(), db_got.data());
  EXPECT_LT(max_rel_error(dw_got, dw_want), kTolerance);
  EXPECT_LT(max_rel_error(db_got, db_want), kTolerance);
  // Only the bias gradient, then only the weights'.
  std::vector<float> db_only(s.c_out, 0.25f), db_only_want = db_only;
  conv2d_backward_cpu(s, x.data(), w.data(), dy.data(), nullptr, nullptr, db_only_want.data(),
                      ws.data());
  conv2d_backward_onednn(s, x.data(), w.data(), dy.data(), nullptr, nullptr, db_only.data());
  EXPECT_LT(max_rel_error(db_only, db_only_want), kTolerance);
  std::vector<float> dw_only(w_size(s), 0.0f), dw_only_want = dw_only;
  conv2d_backward_cpu(s, x.data(), w.data(), dy.data(), nullptr, dw_only_want.data(), nullptr,
                      ws.data());
  conv2d_backward_onednn(s, x.data(), w.data(), dy.data(), nullptr, dw_only.data(), nullptr);
  EXPECT_LT(max_rel_error(dw_only, dw_only_want), kTolerance);
}

INSTANTIATE_TEST_SUITE_P(Shapes, OnednnConv, ::testing::ValuesIn(kConvCases),
                         [](const auto& info) { return std::string(info.param.name); });

// Activations in 16-channel blocks (Conv2dIo): the oracle's values, in blocks, for the CNN's first
// layer (blocked output), its second (blocked input and output, at a batch where oneDNN takes
// Winograd on AVX-512 and at one where it takes the direct kernel; with the direct algorithm
// pinned; with a fused ReLU), and a blocked input alone. On AVX-512 oneDNN chooses these layouts
// itself (conv2d_onednn_blocked16); elsewhere the twins reorder, with the same results.
TEST(OnednnConvBlocked16, MatchesTheOracleInBlocks) {
  SKIP_WITHOUT_ONEDNN();
  using kernel_test::from_blocked16;
  using kernel_test::to_blocked16;
  struct Case {
    const char* name;
    Conv2dShape s;
    Conv2dIo io;
  };
  Conv2dShape relu = conv(17, 14, 14, 32, 64, 3, 1, 1);
  relu.relu = true;
  const Case cases[] = {
      {"conv1 blocked output", conv(5, 28, 28, 1, 32, 3, 1, 1), {false, true}},
      {"conv2 blocked, batch 32", conv(32, 14, 14, 32, 64, 3, 1, 1), {true, true}},
      {"conv2 blocked, batch 3", conv(3, 14, 14, 32, 64, 3, 1, 1), {true, true}},
      {"conv2 blocked, direct", conv(32, 14, 14, 32, 64, 3, 1, 1), {true, true, true}},
      {"conv2 blocked, fused relu", relu, {true, true}},
      {"blocked input alone", conv(16, 9, 7, 16, 24, 3, 1, 1), {true, false}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const Conv2dShape& s = c.s;
    if (onednn_avx512()) {
      EXPECT_TRUE(conv2d_onednn_blocked16(s, c.io)) << onednn_description();
    }
    const int oh = s.out_h(), ow = s.out_w();
    const auto x_in = [&](const std::vector<float>& v) {
      return c.io.x_blocked16 ? to_blocked16(v, s.n, s.h, s.w, s.c_in) : v;
    };
    const auto x_out = [&](const std::vector<float>& v) {
      return c.io.x_blocked16 ? from_blocked16(v, s.n, s.h, s.w, s.c_in) : v;
    };
    const auto y_in = [&](const std::vector<float>& v) {
      return c.io.y_blocked16 ? to_blocked16(v, s.n, oh, ow, s.c_out) : v;
    };
    const auto y_out = [&](const std::vector<float>& v) {
      return c.io.y_blocked16 ? from_blocked16(v, s.n, oh, ow, s.c_out) : v;
    };
    const auto x = random_floats(x_size(s), 1), w = random_floats(w_size(s), 2),
               b = random_floats(s.c_out, 3), dy = random_floats(y_size(s), 4);
    std::vector<float> ws(conv2d_workspace_floats(s)), want(y_size(s)), got(y_size(s));
    conv2d_forward_cpu(s, x.data(), w.data(), b.data(), want.data(), ws.data());
    conv2d_forward_onednn(s, x_in(x).data(), w.data(), b.data(), got.data(), c.io);
    EXPECT_LT(max_rel_error(y_out(got), want), kTolerance);
    std::vector<float> dx_want(x_size(s)), dx(x_size(s), 7.0f), dw_want(w_size(s), 0.5f),
        dw(dw_want), db_want(s.c_out, 0.25f), db(db_want);
    const bool has_dx = s.c_in > 1;
    conv2d_backward_cpu(s, x.data(), w.data(), dy.data(), has_dx ? dx_want.data() : nullptr,
                        dw_want.data(), db_want.data(), ws.data());
    conv2d_backward_onednn(s, x_in(x).data(), w.data(), y_in(dy).data(),
                           has_dx ? dx.data() : nullptr, dw.data(), db.data(), c.io);
    if (has_dx) {
      EXPECT_LT(max_rel_error(x_out(dx), dx_want), kTolerance);
    }
    EXPECT_LT(max_rel_error(dw, dw_want), kTolerance);
    EXPECT_LT(max_rel_error(db, db_want), kTolerance);
    // The bias gradient alone sums dy in its layout.
    std::vector<float> db_only(s.c_out, 0.0f), db_only_want(db_only);
    conv2d_backward_cpu(s, x.data(), w.data(), dy.data(), nullptr, nullptr, db_only_want.data(),
                        ws.data());
    conv2d_backward_onednn(s, x_in(x).data(), w.data(), y_in(dy).data(), nullptr, nullptr,
                           db_only.data(), c.io);
    EXPECT_LT(max_rel_error(db_only, db_only_want), kTolerance);
  }
  float v = 0;
  EXPECT_THROW(conv2d_forward_onednn(conv(1, 4, 4, 8, 16, 3, 1, 1), &v, &v, &v, &v, {true, false}),
               std::invalid_argument)
      << "8 input channels are not whole blocks of 16";
}

TEST(OnednnConvShapes, RejectsBadShapesLikeTheCpuTwin) {
  SKIP_WITHOUT_ONEDNN();
  float v = 0;
  EXPECT_THROW(conv2d_forward_onednn(conv(1, 2, 2, 1, 1, 5, 1, 0), &v, &v, &v, &v),
               std::invalid_argument);
  EXPECT_THROW(conv2d_backward_onednn(conv(1, 4, 4, 0, 1, 3, 1, 1), &v, &v, &v, &v, &v, &v),
               std::invalid_argument);
}

TEST(OnednnGemm, MatchesOpenBlasForEveryTransposeAlphaAndBeta) {
  SKIP_WITHOUT_ONEDNN();
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (float alpha : {1.0f, -0.5f})
        for (float beta : {0.0f, 1.0f, 0.75f}) {
          const GemmShape s{
              .m = 13, .n = 7, .k = 33, .trans_a = ta, .trans_b = tb, .alpha = alpha, .beta = beta};
          const std::vector<float> a = random_floats(13 * 33, 1), b = random_floats(33 * 7, 2);
          std::vector<float> want = random_floats(13 * 7, 3), got = want;
          gemm_cpu(s, a.data(), b.data(), want.data());
          gemm_onednn(s, a.data(), b.data(), got.data());
          EXPECT_LT(max_rel_error(got, want), kTolerance)
              << "trans_a " << ta << " trans_b " << tb << " alpha " << alpha << " beta " << beta;
        }
  // k = 0: C = beta C.
  std::vector<float> c(6, 2.0f);
  gemm_onednn({.m = 2, .n = 3, .k = 0, .beta = 0.5f}, nullptr, nullptr, c.data());
  EXPECT_EQ(c, std::vector<float>(6, 1.0f));
  EXPECT_THROW(gemm_onednn({.m = -1, .n = 1, .k = 1}, nullptr, nullptr, nullptr),
               std::invalid_argument);
}

// Outputs whose rows are a multiple of 1 KiB go through a staging copy with longer rows (the L1
// aliasing gemm_onednn.cpp describes): the same products, beta's C read back in, nothing written
// past C.
TEST(OnednnGemm, WideOutputsStagedMatchOpenBlas) {
  SKIP_WITHOUT_ONEDNN();
  const int m = 256, n = 1280, k = 24;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (float beta : {0.0f, 1.0f, 0.75f}) {
        const GemmShape s{.m = m, .n = n, .k = k, .trans_a = ta, .trans_b = tb, .beta = beta};
        const std::vector<float> a = random_floats(m * k, 1), b = random_floats(k * n, 2);
        std::vector<float> want = random_floats(m * n, 3), got = want;
        got.resize(want.size() + 64, 7.0f);  // a guard past C
        gemm_cpu(s, a.data(), b.data(), want.data());
        gemm_onednn(s, a.data(), b.data(), got.data());
        EXPECT_EQ(std::vector<float>(got.begin() + m * n, got.end()), std::vector<float>(64, 7.0f))
            << "written past C";
        got.resize(want.size());
        EXPECT_LT(max_rel_error(got, want), kTolerance)
            << "trans_a " << ta << " trans_b " << tb << " beta " << beta;
      }
  const GemmShape s{.m = m, .n = n, .k = k};
  const std::vector<float> a = random_floats(m * k, 1), b = random_floats(k * n, 2),
                           bias = random_floats(n, 3);
  std::vector<float> want(static_cast<size_t>(m) * n), got(want.size(), 9.0f);
  for (int i = 0; i < m; ++i) std::copy(bias.begin(), bias.end(), want.begin() + i * n);
  GemmShape seeded = s;
  seeded.beta = 1.0f;
  gemm_cpu(seeded, a.data(), b.data(), want.data());
  gemm_bias_onednn(s, a.data(), b.data(), bias.data(), got.data());
  EXPECT_LT(max_rel_error(got, want), kTolerance) << "with the bias operand";
}

// A weight gradient's product (A^T B, k long against m and n) is split over the threads by k
// (gemm_onednn.cpp's split_k): at 1, 2 and 3 threads, with k not a multiple of the thread count,
// alpha and beta, the same result as OpenBLAS, and the same bits again on a second call.
TEST(OnednnGemm, LongProductsSplitOverThreadsMatchOpenBlas) {
  SKIP_WITHOUT_ONEDNN();
  const int m = 24, n = 40, k = 1001;
  const std::vector<float> a = random_floats(k * m, 1), b = random_floats(k * n, 2);
  for (int threads : {1, 2, 3}) {
    onednn_set_threads(threads);
    for (float alpha : {1.0f, -0.5f})
      for (float beta : {0.0f, 1.0f, 0.75f}) {
        const GemmShape s{.m = m, .n = n, .k = k, .trans_a = true, .alpha = alpha, .beta = beta};
        std::vector<float> want = random_floats(m * n, 3), got = want, again = want;
        gemm_cpu(s, a.data(), b.data(), want.data());
        gemm_onednn(s, a.data(), b.data(), got.data());
        gemm_onednn(s, a.data(), b.data(), again.data());
        EXPECT_LT(max_rel_error(got, want), kTolerance)
            << threads << " threads, alpha " << alpha << " beta " << beta;
        EXPECT_EQ(got, again) << threads << " threads: not the same bits twice";
      }
  }
  onednn_set_threads(1);
}

// The bias as the matmul's own operand: the product plus the bias row on every row, as OpenBLAS
// gives it from C seeded with the bias rows and beta 1.
TEST(OnednnGemm, BiasIsAddedToEveryRow) {
  SKIP_WITHOUT_ONEDNN();
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const GemmShape s{.m = 13, .n = 7, .k = 33, .trans_a = ta, .trans_b = tb};
      const std::vector<float> a = random_floats(13 * 33, 1), b = random_floats(33 * 7, 2),
                               bias = random_floats(7, 3);
      std::vector<float> want(13 * 7), got(13 * 7, 9.0f);
      for (int i = 0; i < 13; ++i) std::copy(bias.begin(), bias.end(), want.begin() + i * 7);
      GemmShape seeded = s;
      seeded.beta = 1.0f;
      gemm_cpu(seeded, a.data(), b.data(), want.data());
      gemm_bias_onednn(s, a.data(), b.data(), bias.data(), got.data());
      EXPECT_LT(max_rel_error(got, want), kTolerance) << "trans_a " << ta << " trans_b " << tb;
    }
  std::vector<float> v(4);
  EXPECT_THROW(gemm_bias_onednn({.m = 1, .n = 1, .k = 1, .beta = 1.0f}, v.data(), v.data(),
                                v.data(), v.data()),
               std::invalid_argument)
      << "a bias with beta: the sum post-op and the bias together are not offered";
  EXPECT_THROW(gemm_bias_onednn({.m = 1, .n = 1, .k = 1, .alpha = 2.0f}, v.data(), v.data(),
                                v.data(), v.data()),
               std::invalid_argument)
      << "oneDNN would scale the bias too";
}

// bf16 operands (gemm_bf16_onednn): the product of two bf16 values is exact in fp32, so the
// result is OpenBLAS's over the same values widened to fp32, up to the order of the sums; every
// transpose, alpha and beta, and a long A^T B split by k over 2 threads. Where oneDNN has no bf16
// matmul for this CPU (an AVX2-only one) the call says so instead; an AVX-512 one must have it.
TEST(OnednnGemm, Bf16OperandsMatchOpenBlasOnTheRoundedValues) {
  SKIP_WITHOUT_ONEDNN();
  const auto rounded = [](const std::vector<float>& v, std::vector<uint16_t>* words) {
    words->resize(v.size());
    cast_f32_to_bf16_cpu(v.data(), words->data(), v.size());
    std::vector<float> back(v.size());
    cast_bf16_to_f32_cpu(words->data(), back.data(), v.size());
    return back;
  };
  if (!onednn_avx512()) {
    std::vector<uint16_t> one(1, 0x3f80);
    float c = 0;
    try {
      gemm_bf16_onednn({.m = 1, .n = 1, .k = 1}, one.data(), one.data(), &c);
      EXPECT_EQ(c, 1.0f) << "1 x 1 where oneDNN has a bf16 matmul without AVX-512";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("has no bf16 matmul for this CPU"), std::string::npos)
          << e.what();
    }
    return;
  }
  std::vector<uint16_t> a16, b16;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (float alpha : {1.0f, -0.5f})
        for (float beta : {0.0f, 0.75f}) {
          const GemmShape s{
              .m = 13, .n = 7, .k = 33, .trans_a = ta, .trans_b = tb, .alpha = alpha, .beta = beta};
          const std::vector<float> a = rounded(random_floats(13 * 33, 1), &a16),
                                   b = rounded(random_floats(33 * 7, 2), &b16);
          std::vector<float> want = random_floats(13 * 7, 3), got = want;
          gemm_cpu(s, a.data(), b.data(), want.data());
          gemm_bf16_onednn(s, a16.data(), b16.data(), got.data());
          EXPECT_LT(max_rel_error(got, want), kTolerance)
              << "trans_a " << ta << " trans_b " << tb << " alpha " << alpha << " beta " << beta;
        }
  const int m = 24, n = 40, k = 1001;
  const std::vector<float> a = rounded(random_floats(k * m, 1), &a16),
                           b = rounded(random_floats(k * n, 2), &b16);
  onednn_set_threads(2);
  const GemmShape s{.m = m, .n = n, .k = k, .trans_a = true, .beta = 1.0f};
  std::vector<float> want = random_floats(m * n, 3), got = want;
  gemm_cpu(s, a.data(), b.data(), want.data());
  gemm_bf16_onednn(s, a16.data(), b16.data(), got.data());
  onednn_set_threads(1);
  EXPECT_LT(max_rel_error(got, want), kTolerance) << "split by k over 2 threads";
}

TEST(OnednnDense, MatchesOpenBlasAndAccumulates) {
  SKIP_WITHOUT_ONEDNN();
  for (DenseShape s : {DenseShape{64, 3136, 10}, DenseShape{1, 5, 3}, DenseShape{7, 33, 17}}) {
    const size_t xs = static_cast<size_t>(s.batch) * s.in, ws = static_cast<size_t>(s.in) * s.out,
                 ys = static_cast<size_t>(s.batch) * s.out;
    const std::vector<float> x = random_floats(xs, 1), w = random_floats(ws, 2),
                             b = random_floats(s.out, 3), dy = random_floats(ys, 4);
    std::vector<float> y_want(ys), y_got(ys);
    dense_forward_cpu(s, x.data(), w.data(), b.data(), y_want.data());
    dense_forward_onednn(s, x.data(), w.data(), b.data(), y_got.data());
    EXPECT_LT(max_rel_error(y_got, y_want), kTolerance) << "y, batch " << s.batch;
    std::vector<float> dx_want(xs), dw_want = random_floats(ws, 5),
                                    db_want = random_floats(s.out, 6);
    std::vector<float> dx_got(xs), dw_got = dw_want, db_got = db_want;
    dense_backward_cpu(s, x.data(), w.data(), dy.data(), dx_want.data(), dw_want.data(),
                       db_want.data());
    dense_backward_onednn(s, x.data(), w.data(), dy.data(), dx_got.data(), dw_got.data(),
                          db_got.data());
    EXPECT_LT(max_rel_error(dx_got, dx_want), kTolerance) << "dx, batch " << s.batch;
    EXPECT_LT(max_rel_error(dw_got, dw_want), kTolerance) << "dw, batch " << s.batch;
    EXPECT_LT(max_rel_error(db_got, db_want), kTolerance) << "db, batch " << s.batch;
  }
}

TEST(OnednnStub, WithoutOnednnTheTwinsSaySo) {
  if (onednn_built()) GTEST_SKIP() << "this build has oneDNN: the stub is not linked";
  float v = 0;
  EXPECT_THROW(gemm_onednn({.m = 1, .n = 1, .k = 1}, &v, &v, &v), std::logic_error);
  uint16_t w = 0;
  EXPECT_THROW(gemm_bf16_onednn({.m = 1, .n = 1, .k = 1}, &w, &w, &v), std::logic_error);
  EXPECT_THROW(conv2d_forward_onednn(conv(1, 3, 3, 1, 1, 3, 1, 1), &v, &v, &v, &v),
               std::logic_error);
}

}  // namespace
}  // namespace lockstep::kernels
