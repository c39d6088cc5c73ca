// Parity of the CUDA twins with their CPU twins, which serve as the oracle: random inputs of
// several shapes, forward and backward passes, optimizer updates, and one whole training step of a
// small CNN assembled from the kernels. Tolerances follow the arithmetic: selects and copies must
// match bit for bit (NaN, infinities and -0 included); an fp32 GEMM must not round its inputs to
// TF32 (an exact case); fp32 sums may differ in order (1e-4 of the result's scale for gemm-based
// ops, tighter for elementwise ones); bf16 inputs lose 8 mantissa bits (1e-2). Every test skips,
// with the reason, where no GPU answers or the build has no CUDA.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpu_parity.h"
#include "kernels/activation.h"
#include "kernels/cast.h"
#include "kernels/conv/conv2d.h"
#include "kernels/conv/conv_pool.h"
#include "kernels/conv/pool.h"
#include "kernels/cuda/info.h"
#include "kernels/cuda/memory.h"
#include "kernels/dense.h"
#include "kernels/gemm.h"
#include "kernels/step/loss.h"
#include "kernels/step/optimizer.h"

namespace lk = lockstep::kernels;
using namespace lockstep::testing_util;

namespace {

TEST_F(GpuParity, GemmMatchesCpuForEveryTransposeAndScale) {
  const lk::GemmShape shapes[] = {
      {.m = 1, .n = 1, .k = 1},
      {.m = 7, .n = 5, .k = 3},
      {.m = 64, .n = 33, .k = 17, .trans_a = true},
      {.m = 31, .n = 64, .k = 129, .trans_b = true, .alpha = 0.5f, .beta = 1.0f},
      {.m = 128, .n = 96, .k = 200, .trans_a = true, .trans_b = true, .alpha = 1.5f, .beta = -0.5f},
      {.m = 3, .n = 300, .k = 2, .beta = 2.0f},
  };
  for (const auto& s : shapes) {
    SCOPED_TRACE(testing::Message() << "m=" << s.m << " n=" << s.n << " k=" << s.k
                                    << " ta=" << s.trans_a << " tb=" << s.trans_b);
    const Floats a = random_floats(size_t(s.m) * s.k, rng_);
    const Floats b = random_floats(size_t(s.k) * s.n, rng_);
    Floats c = random_floats(size_t(s.m) * s.n, rng_);
    DeviceArray<float> da(a), db(b), dc(c);
    lk::gemm_cpu(s, a.data(), b.data(), c.data());
    lk::gemm_cuda(s, da.get(), db.get(), dc.get(), stream_);
    sync();
    EXPECT_TRUE(close(dc.download(), c, 1e-4));
  }
}

// 1 + 2^-12 needs 13 significant bits: fp32 keeps them (24), TF32 (11) rounds the operand to 1.
// Every partial sum j * (1 + 2^-12) with j <= k <= 512 is exact in fp32, whatever the order or the
// split of the sum, so an fp32 GEMM gives exactly k * (1 + 2^-12) and one on TF32 tensor cores k:
// a relative tolerance would not see the difference (2^-12), this does.
TEST_F(GpuParity, Fp32GemmIsExactWhereTf32WouldRound) {
  const float fine = 1.0f + std::ldexp(1.0f, -12);
  const lk::GemmShape shapes[] = {
      {.m = 64, .n = 64, .k = 64},
      {.m = 128, .n = 256, .k = 512, .trans_a = true},
      {.m = 256, .n = 128, .k = 128, .trans_b = true},
  };
  for (const auto& s : shapes) {
    SCOPED_TRACE(testing::Message() << "m=" << s.m << " n=" << s.n << " k=" << s.k);
    const float want = static_cast<float>(s.k * (1.0 + std::ldexp(1.0, -12)));
    ASSERT_NE(want, static_cast<float>(s.k));
    DeviceArray<float> da(Floats(size_t(s.m) * s.k, fine)), db(Floats(size_t(s.k) * s.n, 1.0f)),
        dc(size_t(s.m) * s.n);
    lk::gemm_cuda(s, da.get(), db.get(), dc.get(), stream_);
    sync();
    const Floats got = dc.download();
    const auto wrong = std::count_if(got.begin(), got.end(), [&](float v) { return v != want; });
    EXPECT_EQ(wrong, 0) << "of " << got.size() << " elements, e.g. " << got[0] << " instead of "
                        << want << ": the fp32 GEMM rounds its inputs (TF32?)";
  }
}

TEST_F(GpuParity, Bf16GemmAccumulatesInFp32) {
  const lk::GemmShape shapes[] = {
      {.m = 16, .n = 16, .k = 16},
      {.m = 33, .n = 70, .k = 257, .trans_a = true},
      {.m = 128, .n = 10, .k = 512, .trans_b = true, .beta = 1.0f},
  };
  for (const auto& s : shapes) {
    SCOPED_TRACE(testing::Message() << "m=" << s.m << " n=" << s.n << " k=" << s.k);
    const Floats a = random_floats(size_t(s.m) * s.k, rng_);
    const Floats b = random_floats(size_t(s.k) * s.n, rng_);
    const Floats c0 = random_floats(size_t(s.m) * s.n, rng_);
    std::vector<uint16_t> a16(a.size()), b16(b.size());
    lk::cast_f32_to_bf16_cpu(a.data(), a16.data(), a.size());
    lk::cast_f32_to_bf16_cpu(b.data(), b16.data(), b.size());
    // Oracle 1: fp32 gemm of the bf16-rounded inputs (products of bf16 are exact in fp32).
    Floats ar(a.size()), br(b.size()), rounded = c0, exact = c0;
    lk::cast_bf16_to_f32_cpu(a16.data(), ar.data(), a.size());
    lk::cast_bf16_to_f32_cpu(b16.data(), br.data(), b.size());
    lk::gemm_cpu(s, ar.data(), br.data(), rounded.data());
    // Oracle 2: the fp32 gemm of the original inputs, which bf16 approximates.
    lk::gemm_cpu(s, a.data(), b.data(), exact.data());
    DeviceArray<uint16_t> da(a16), db(b16);
    DeviceArray<float> dc(c0);
    lk::gemm_bf16_cuda(s, da.get(), db.get(), dc.get(), stream_);
    sync();
    const Floats got = dc.download();
    // Only the order of fp32 additions differs from oracle 1 (tensor-core accumulation is not
    // quite IEEE, hence 1e-3); against oracle 2 the bf16 rounding of the inputs shows.
    EXPECT_TRUE(close(got, rounded, 1e-3));
    EXPECT_TRUE(close(got, exact, 1e-2));
  }
}

// The bias in cuBLASLt's epilogue: the oracle is the fp32 GEMM of the bf16-rounded inputs plus the
// bias row, with C either written (beta 0) or added to (beta 1; also from a C_in apart from C, a
// residual stream); GPT-sized shapes; and the same calls with a bias off 16-byte alignment (the
// fill or row addition, then the plain GEMM) giving the same values.
TEST_F(GpuParity, Bf16GemmWithBiasEpilogue) {
  const lk::GemmShape shapes[] = {
      {.m = 16, .n = 16, .k = 16},
      {.m = 33, .n = 72, .k = 256, .trans_a = true, .beta = 1.0f},
      {.m = 64, .n = 40, .k = 96, .trans_b = true},
      {.m = 2048, .n = 2304, .k = 768},
      {.m = 2048, .n = 768, .k = 3072, .beta = 1.0f},
  };
  for (const auto& s : shapes) {
    for (size_t bias_offset : {0, 1}) {
      SCOPED_TRACE(testing::Message() << "m=" << s.m << " n=" << s.n << " k=" << s.k
                                      << " beta=" << s.beta << " bias offset " << bias_offset);
      const Floats a = random_floats(size_t(s.m) * s.k, rng_);
      const Floats b = random_floats(size_t(s.k) * s.n, rng_);
      const Floats bias = random_floats(s.n + 1, rng_);
      const Floats c0 = random_floats(size_t(s.m) * s.n, rng_);
      std::vector<uint16_t> a16(a.size()), b16(b.size());
      lk::cast_f32_to_bf16_cpu(a.data(), a16.data(), a.size());
      lk::cast_f32_to_bf16_cpu(b.data(), b16.data(), b.size());
      Floats ar(a.size()), br(b.size()), want = c0;
      lk::cast_bf16_to_f32_cpu(a16.data(), ar.data(), a.size());
      lk::cast_bf16_to_f32_cpu(b16.data(), br.data(), b.size());
      lk::gemm_cpu(s, ar.data(), br.data(), want.data());
      for (size_t r = 0; r < size_t(s.m); ++r)
        for (size_t j = 0; j < size_t(s.n); ++j) want[r * s.n + j] += bias[bias_offset + j];
      DeviceArray<uint16_t> da(a16), db(b16);
      DeviceArray<float> dbias(bias), dc(c0);
      lk::gemm_bf16_bias_cuda(s, da.get(), db.get(), dbias.get() + bias_offset, dc.get(), stream_);
      sync();
      EXPECT_TRUE(close(dc.download(), want, 1e-3));
      if (s.beta == 0.0f) continue;
      // C_in apart from C (a residual stream): C keeps none of what it held.
      DeviceArray<float> dc_in(c0), dout(random_floats(c0.size(), rng_));
      lk::gemm_bf16_bias_cuda(s, da.get(), db.get(), dbias.get() + bias_offset, dout.get(), stream_,
                              dc_in.get());
      sync();
      EXPECT_TRUE(close(dout.download(), want, 1e-3)) << "C_in apart from C";
    }
  }
}

TEST_F(GpuParity, CastsGiveTheCpuBitsIncludingSpecialValues) {
  Floats x = random_floats(10000, rng_, -1e4f, 1e4f);
  const uint32_t specials[] = {0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000,
                               0xffc00001, 0x7f800001, 0x00000001, 0x807fffff, 0x7f7fffff,
                               0x3f808000, 0x3f818000, 0x3f80ffff, 0x7f7f8000};
  for (uint32_t bits : specials) {
    float f;
    std::memcpy(&f, &bits, 4);
    x.push_back(f);
  }
  std::vector<uint16_t> want(x.size());
  lk::cast_f32_to_bf16_cpu(x.data(), want.data(), x.size());
  DeviceArray<float> dx(x);
  DeviceArray<uint16_t> dh(x.size());
  lk::cast_f32_to_bf16_cuda(dx.get(), dh.get(), x.size(), stream_);
  sync();
  EXPECT_EQ(dh.download(), want);
  // The same words from buffers that start off the vector kernel's alignment, or on it mid-buffer.
  for (size_t offset : {1, 3, 4}) {
    SCOPED_TRACE(testing::Message() << "offset " << offset);
    DeviceArray<uint16_t> part(x.size());
    lk::cast_f32_to_bf16_cuda(dx.get() + offset, part.get() + offset, x.size() - offset, stream_);
    sync();
    const std::vector<uint16_t> got = part.download();
    EXPECT_TRUE(std::equal(got.begin() + offset, got.end(), want.begin() + offset));
  }

  std::vector<uint16_t> every(65536);
  for (size_t i = 0; i < every.size(); ++i) every[i] = static_cast<uint16_t>(i);
  Floats back(every.size());
  lk::cast_bf16_to_f32_cpu(every.data(), back.data(), every.size());
  DeviceArray<uint16_t> de(every);
  DeviceArray<float> dback(every.size());
  lk::cast_bf16_to_f32_cuda(de.get(), dback.get(), every.size(), stream_);
  sync();
  const Floats got = dback.download();
  EXPECT_EQ(std::memcmp(got.data(), back.data(), got.size() * sizeof(float)), 0);
}

// The bias gradient's column sums read four columns a thread where the gradient is 16-byte
// aligned and one otherwise, adding in the same order: the same bits from either, near the CPU's.
TEST_F(GpuParity, BiasGradientBitsDoNotDependOnAlignment) {
  const lk::DenseShape s{300, 8, 64};
  const Floats dy = random_floats(size_t(s.batch) * s.out, rng_);
  Floats shifted(dy.size() + 1), db(s.out);
  std::copy(dy.begin(), dy.end(), shifted.begin() + 1);
  lk::dense_backward_cpu(s, nullptr, nullptr, dy.data(), nullptr, nullptr, db.data());
  DeviceArray<float> gdy(dy), gshifted(shifted), gdb(size_t(s.out)), gdb_shifted(size_t(s.out));
  lk::dense_backward_cuda(s, nullptr, nullptr, gdy.get(), nullptr, nullptr, gdb.get(), stream_);
  lk::dense_backward_cuda(s, nullptr, nullptr, gshifted.get() + 1, nullptr, nullptr,
                          gdb_shifted.get(), stream_);
  sync();
  EXPECT_EQ(gdb.download(), gdb_shifted.download());
  EXPECT_TRUE(close(gdb.download(), db, 1e-5));
}

// The column sums' order of additions, as kernels/cuda/column_sums.cuh documents it, emulated on
// the host and asserted bit for bit (the comparisons above hold two paths of the same template to
// each other, which an order wrong in both would pass): chunks of ceil(rows / chunks) rows
// (chunks = min(256, ceil(rows / 64)); at 16,385 rows the last chunks are short or empty), each
// chunk's rows lane, lane + 8, ... summed per lane, the 8 lanes in order; then per lane the chunks
// lane, lane + 8, ..., the 8 lanes in order, added to db. Four columns a thread (36 columns) and
// one (33), and a single chunk (100 rows).
TEST_F(GpuParity, BiasGradientAddsInTheDocumentedOrder) {
  auto emulate = [](const Floats& dy, size_t rows, int cols, Floats db) {
    const size_t chunks = std::min<size_t>(256, std::max<size_t>(1, (rows + 63) / 64));
    const size_t chunk_rows = (rows + chunks - 1) / chunks;
    for (int j = 0; j < cols; ++j) {
      Floats partial(chunks, 0.0f);
      for (size_t c = 0; c < chunks; ++c) {
        const size_t begin = c * chunk_rows, end = std::min(rows, begin + chunk_rows);
        float lanes[8] = {};
        for (int lane = 0; lane < 8; ++lane)
          for (size_t r = begin + lane; r < end; r += 8) lanes[lane] += dy[r * cols + j];
        float sum = 0.0f;
        for (float v : lanes) sum += v;
        partial[c] = sum;
      }
      float lanes[8] = {};
      for (int lane = 0; lane < 8; ++lane)
        for (size_t c = lane; c < chunks; c += 8) lanes[lane] += partial[c];
      float total = 0.0f;
      for (float v : lanes) total += v;
      db[j] += total;
    }
    return db;
  };
  for (const lk::DenseShape s :
       {lk::DenseShape{16385, 4, 36}, lk::DenseShape{16385, 4, 33}, lk::DenseShape{100, 4, 36}}) {
    SCOPED_TRACE(testing::Message() << s.batch << " rows, " << s.out << " columns");
    const Floats dy = random_floats(size_t(s.batch) * s.out, rng_);
    const Floats db0 = random_floats(size_t(s.out), rng_);  // accumulated into
    DeviceArray<float> gdy(dy), gdb(db0);
    lk::dense_backward_cuda(s, nullptr, nullptr, gdy.get(), nullptr, nullptr, gdb.get(), stream_);
    sync();
    const Floats got = gdb.download(), want = emulate(dy, size_t(s.batch), s.out, db0);
    for (int j = 0; j < s.out; ++j)
      EXPECT_EQ(0, std::memcmp(&got[j], &want[j], sizeof(float)))
          << "column " << j << ": " << got[j] << " against " << want[j];
  }
}

TEST_F(GpuParity, DenseForwardAndBackward) {
  for (const auto& s : parity_dense_shapes()) {
    for (bool bias : {true, false}) {
      SCOPED_TRACE(describe(s, bias));
      const Floats x = random_floats(size_t(s.batch) * s.in, rng_);
      const Floats w = random_floats(size_t(s.in) * s.out, rng_);
      const Floats b = random_floats(s.out, rng_);
      const Floats dy = random_floats(size_t(s.batch) * s.out, rng_);
      // dw and db start non-zero: the backward pass accumulates into them.
      Floats y(size_t(s.batch) * s.out), dx(x.size()), dw = random_floats(w.size(), rng_),
                                                       db = random_floats(b.size(), rng_);
      DeviceArray<float> gx(x), gw(w), gb(b), gdy(dy), gy(y.size()), gdx(dx.size()), gdw(dw),
          gdb(db);
      lk::dense_forward_cpu(s, x.data(), w.data(), bias ? b.data() : nullptr, y.data());
      lk::dense_backward_cpu(s, x.data(), w.data(), dy.data(), dx.data(), dw.data(),
                             bias ? db.data() : nullptr);
      lk::dense_forward_cuda(s, gx.get(), gw.get(), bias ? gb.get() : nullptr, gy.get(), stream_);
      lk::dense_backward_cuda(s, gx.get(), gw.get(), gdy.get(), gdx.get(), gdw.get(),
                              bias ? gdb.get() : nullptr, stream_);
      sync();
      EXPECT_TRUE(close(gy.download(), y, 1e-4)) << "y";
      EXPECT_TRUE(close(gdx.download(), dx, 1e-4)) << "dx";
      EXPECT_TRUE(close(gdw.download(), dw, 1e-4)) << "dw";
      EXPECT_TRUE(close(gdb.download(), db, 1e-5)) << "db";
    }
  }
}

TEST_F(GpuParity, Conv2dForwardAndBackwardForAnyGeometry) {
  for (const auto& s : parity_conv_shapes()) {
    SCOPED_TRACE(describe(s));
    const ConvCase c(s, rng_);
    const ConvResult want = cpu_conv(s, c);
    const size_t ws = lk::conv2d_workspace_floats(s);
    // dw and db start non-zero (the backward pass accumulates into them): the device copies are
    // of the case's dw0 and db0, which the CPU pass leaves alone.
    DeviceArray<float> gx(c.x), gw(c.w), gb(c.b), gdy(c.dy), gy(c.dy.size()), gdx(c.x.size()),
        gdw(c.dw0), gdb(c.db0), gwork(ws);
    lk::conv2d_forward_cuda(s, gx.get(), gw.get(), gb.get(), gy.get(), gwork.get(), stream_);
    lk::conv2d_backward_cuda(s, gx.get(), gw.get(), gdy.get(), gdx.get(), gdw.get(), gdb.get(),
                             gwork.get(), stream_);
    sync();
    EXPECT_TRUE(close(gy.download(), want.y, 1e-4)) << "y";
    EXPECT_TRUE(close(gdx.download(), want.dx, 1e-4)) << "dx";
    EXPECT_TRUE(close(gdw.download(), want.dw, 1e-4)) << "dw";
    EXPECT_TRUE(close(gdb.download(), want.db, 1e-4)) << "db";
  }
}

// cuDNN's twin (a build with cuDNN): the same oracle and tolerances as the im2col twin, with the
// weights in its KRSC copy, a fused ReLU on one shape, and a workspace sized for a larger batch
// (a model sizes it once, for its largest batch).
TEST_F(GpuParity, CudnnConv2dForwardAndBackwardForAnyGeometry) {
  if (!lk::conv2d_cudnn_available()) GTEST_SKIP() << "this build has no cuDNN";
  bool relu = false;
  for (auto s : parity_conv_shapes()) {
    s.relu = relu = !relu;
    SCOPED_TRACE(describe(s) + (s.relu ? " relu" : ""));
    lk::Conv2dShape larger = s;
    larger.n = s.n + 3;
    const size_t ws = lk::conv2d_cudnn_workspace_floats(larger, false);
    ASSERT_GE(ws, lk::conv2d_cudnn_workspace_floats(s, false));
    const ConvCase c(s, rng_);
    const ConvResult want = cpu_conv(s, c);
    DeviceArray<float> gx(c.x), gw(c.w), gwk(c.w.size()), gb(c.b), gdy(c.dy), gy(c.dy.size()),
        gdx(c.x.size()), gdw(c.dw0), gdb(c.db0), gwork(ws);
    lk::conv2d_weights_krsc_cuda(s, gw.get(), gwk.get(), stream_);
    lk::conv2d_forward_cudnn(s, gx.get(), gwk.get(), gb.get(), gy.get(), gwork.get(), stream_);
    lk::conv2d_backward_cudnn(s, gx.get(), gwk.get(), gdy.get(), gdx.get(), gdw.get(), gdb.get(),
                              gwork.get(), stream_);
    sync();
    EXPECT_TRUE(close(gy.download(), want.y, 1e-4)) << "y";
    EXPECT_TRUE(close(gdx.download(), want.dx, 1e-4)) << "dx";
    EXPECT_TRUE(close(gdw.download(), want.dw, 1e-4)) << "dw";
    EXPECT_TRUE(close(gdb.download(), want.db, 1e-4)) << "db";
  }
}

// The direct kernels (few taps per output): forward with bias (and a fused ReLU on one shape),
// filter and bias gradients accumulated onto non-zero values, each optional; the CNN's first layer
// at batches whose rows do not divide into the filter pass's blocks evenly.
TEST_F(GpuParity, DirectConv2dForwardAndFilterGradient) {
  std::vector<lk::Conv2dShape> shapes;
  for (const auto& s : parity_conv_shapes())
    if (lk::conv2d_direct_supported(s)) shapes.push_back(s);
  shapes.push_back({.n = 37, .h = 28, .w = 28, .c_in = 1, .c_out = 32});
  shapes.push_back({.n = 3, .h = 6, .w = 5, .c_in = 3, .c_out = 200, .stride = 2});
  ASSERT_GE(shapes.size(), 4u);
  bool relu = false;
  for (auto s : shapes) {
    s.relu = relu = !relu;
    SCOPED_TRACE(describe(s) + (s.relu ? " relu" : ""));
    const ConvCase c(s, rng_);
    const ConvResult want = cpu_conv(s, c, /*with_dx=*/false);
    DeviceArray<float> gx(c.x), gw(c.w), gb(c.b), gdy(c.dy), gy(c.dy.size()), gdw(c.dw0),
        gdb(c.db0), gdw_only(c.dw0), gwork(lk::conv2d_direct_workspace_floats(s));
    lk::conv2d_forward_direct_cuda(s, gx.get(), gw.get(), gb.get(), gy.get(), false, stream_);
    lk::conv2d_filter_direct_cuda(s, gx.get(), gdy.get(), gdw.get(), gdb.get(), gwork.get(), false,
                                  stream_);
    lk::conv2d_filter_direct_cuda(s, gx.get(), gdy.get(), gdw_only.get(), nullptr, gwork.get(),
                                  false, stream_);
    sync();
    EXPECT_TRUE(close(gy.download(), want.y, 1e-5)) << "y";
    EXPECT_TRUE(close(gdw.download(), want.dw, 1e-4)) << "dw";
    EXPECT_TRUE(close(gdb.download(), want.db, 1e-4)) << "db";
    EXPECT_EQ(gdw_only.download(), gdw.download()) << "dw without db: the same sums, in order";
  }
  const lk::Conv2dShape wide{.n = 1, .h = 4, .w = 4, .c_in = 4, .c_out = 8};  // 36 taps
  EXPECT_FALSE(lk::conv2d_direct_supported(wide));
  EXPECT_THROW(
      lk::conv2d_forward_direct_cuda(wide, nullptr, nullptr, nullptr, nullptr, false, stream_),
      std::invalid_argument);
}

// The fused first convolution + max-pool (+ ReLU) (LOCKSTEP_CUDA_CONV_POOL=fused) against the CPU
// kernels of conv_pool.h. Small integers and halves (exact in bf16 too): every sum is exact in
// either order, so the pooled values, each window's winning position (ties included), the ReLU's
// cuts and the gradients (accumulated onto non-zero values) match bit for bit in fp32 and bf16.
// Random values: the forward pass sums in the CPU's order, so close to 1e-6; the filter pass in
// blocks, close to 1e-4 and the same bits on a second run.
TEST_F(GpuParity, FusedConvPoolMatchesTheCpuKernels) {
  struct Case {
    int n, h, w, c_out, kernel, k;
    bool relu;
  };
  const Case cases[] = {{5, 28, 28, 32, 3, 2, true},
                        {3, 28, 28, 32, 3, 2, false},
                        {2, 7, 9, 16, 3, 2, true},
                        {2, 11, 10, 48, 5, 3, true},
                        {37, 28, 28, 32, 3, 2, true}};
  const auto levels = [&](size_t n, int lo, int hi, float scale) {
    std::uniform_int_distribution<int> level(lo, hi);
    Floats v(n);
    for (float& x : v) x = static_cast<float>(level(rng_)) * scale;
    return v;
  };
  for (const Case& c : cases) {
    const lk::Conv2dShape conv{.n = c.n,
                               .h = c.h,
                               .w = c.w,
                               .c_in = 1,
                               .c_out = c.c_out,
                               .kh = c.kernel,
                               .kw = c.kernel,
                               .pad_h = c.kernel / 2,
                               .pad_w = c.kernel / 2};
    ASSERT_TRUE(lk::conv_pool_cuda_supported(conv, c.k));
    const lk::ConvPoolShape s{conv, c.k, c.relu, false};
    const size_t pooled = size_t(c.n) * s.out_h() * s.out_w() * c.c_out;
    const size_t taps = size_t(c.kernel) * c.kernel;
    for (bool exact : {true, false}) {
      const Floats x = exact ? levels(size_t(c.n) * c.h * c.w, -2, 2, 1.0f)
                             : random_floats(size_t(c.n) * c.h * c.w, rng_);
      const Floats w =
          exact ? levels(taps * c.c_out, -2, 2, 0.5f) : random_floats(taps * c.c_out, rng_);
      const Floats b = exact ? levels(c.c_out, -2, 2, 0.5f) : random_floats(c.c_out, rng_);
      const Floats dy = exact ? levels(pooled, -3, 3, 0.25f) : random_floats(pooled, rng_);
      Floats y(pooled), dw(w.size(), 0.5f), db(c.c_out, 0.25f),
          scratch(lk::conv_pool_scratch_floats(s));
      std::vector<int8_t> arg(pooled);
      lk::conv_pool_forward_cpu(s, x.data(), w.data(), b.data(), y.data(), arg.data());
      lk::conv_pool_backward_cpu(s, x.data(), dy.data(), arg.data(), dw.data(), db.data(),
                                 scratch.data());
      for (bool bf16 : {false, true}) {
        if (bf16 && !exact) continue;  // bf16 rounds random values: the CPU kernels do not
        SCOPED_TRACE(testing::Message() << "n=" << c.n << " " << c.h << "x" << c.w << " K="
                                        << c.kernel << " pool " << c.k << (c.relu ? " relu" : "")
                                        << (exact ? " exact" : " random") << (bf16 ? " bf16" : ""));
        DeviceArray<float> gx(x), gw(w), gb(b), gdy(dy), gy(pooled), gdw(Floats(w.size(), 0.5f)),
            gdb(Floats(c.c_out, 0.25f)), again(Floats(w.size(), 0.5f)),
            gwork(lk::conv_pool_cuda_workspace_floats(s));
        DeviceArray<int8_t> garg(pooled);
        lk::conv_pool_forward_cuda(s, gx.get(), gw.get(), gb.get(), gy.get(), garg.get(), bf16,
                                   stream_);
        sync();
        if (exact) {
          EXPECT_EQ(gy.download(), y);
          EXPECT_EQ(garg.download(), arg);
          if (c.relu) {
            EXPECT_GT(std::count(arg.begin(), arg.end(), int8_t{-1}), 0) << "no ReLU cut";
          }
        } else {
          EXPECT_TRUE(close(gy.download(), y, 1e-6)) << "y";
        }
        // The backward pass from the CPU's window positions: a near-tie that rounding settled
        // otherwise would move a whole product to another tap.
        garg.upload(arg);
        lk::conv_pool_backward_cuda(s, gx.get(), gdy.get(), garg.get(), gdw.get(), gdb.get(),
                                    gwork.get(), bf16, stream_);
        lk::conv_pool_backward_cuda(s, gx.get(), gdy.get(), garg.get(), again.get(), nullptr,
                                    gwork.get(), bf16, stream_);
        sync();
        if (exact) {
          EXPECT_EQ(gdw.download(), dw);
          EXPECT_EQ(gdb.download(), db);
        } else {
          EXPECT_TRUE(close(gdw.download(), dw, 1e-4)) << "dw";
          EXPECT_TRUE(close(gdb.download(), db, 1e-4)) << "db";
        }
        EXPECT_EQ(again.download(), gdw.download()) << "dw without db: the same sums, in order";
      }
    }
  }
  const lk::Conv2dShape two_channels{
      .n = 1, .h = 8, .w = 8, .c_in = 2, .c_out = 16, .kh = 3, .kw = 3, .pad_h = 1, .pad_w = 1};
  EXPECT_FALSE(lk::conv_pool_cuda_supported(two_channels, 2));
  EXPECT_THROW(lk::conv_pool_forward_cuda({two_channels, 2, false, false}, nullptr, nullptr,
                                          nullptr, nullptr, nullptr, false, stream_),
               std::invalid_argument);
}

// As Fp32GemmIsExactWhereTf32WouldRound, for cuDNN's fp32 convolutions: x = 1 + 2^-12, w = 1, no
// padding, so every output is 288 * (1 + 2^-12), whose partial sums are exact in fp32. TF32 would
// round x to 1 (an error of 2^-12 of the result); a transform-based algorithm (Winograd, FFT) may
// leave rounding of order 1e-6, within the 2^-16 allowed here.
TEST_F(GpuParity, CudnnFp32ConvolutionDoesNotRoundToTf32) {
  if (!lk::conv2d_cudnn_available()) GTEST_SKIP() << "this build has no cuDNN";
  const lk::Conv2dShape s{
      .n = 8, .h = 16, .w = 16, .c_in = 32, .c_out = 64, .pad_h = 0, .pad_w = 0};
  const size_t x_n = size_t(s.n) * s.h * s.w * s.c_in;
  const size_t y_n = size_t(s.n) * s.out_h() * s.out_w() * s.c_out;
  const double want = 9.0 * s.c_in * (1.0 + std::ldexp(1.0, -12));
  DeviceArray<float> gx(Floats(x_n, 1.0f + std::ldexp(1.0f, -12))),
      gw(Floats(size_t(9) * s.c_in * s.c_out, 1.0f)), gwk(size_t(9) * s.c_in * s.c_out), gy(y_n),
      gwork(lk::conv2d_cudnn_workspace_floats(s, false));
  lk::conv2d_weights_krsc_cuda(s, gw.get(), gwk.get(), stream_);
  lk::conv2d_forward_cudnn(s, gx.get(), gwk.get(), nullptr, gy.get(), gwork.get(), stream_);
  sync();
  const Floats got = gy.download();
  const auto wrong = std::count_if(got.begin(), got.end(), [&](float v) {
    return std::fabs(v - want) > want * std::ldexp(1.0, -16);
  });
  EXPECT_EQ(wrong, 0) << "of " << got.size() << " outputs; first " << got[0] << ", want " << want;
}

TEST_F(GpuParity, MaxPoolMatchesExactlyTiesIncluded) {
  const lk::PoolShape shapes[] = {{.n = 2, .h = 4, .w = 4, .c = 3},
                                  {.n = 3, .h = 7, .w = 5, .c = 5},
                                  {.n = 2, .h = 9, .w = 9, .c = 4, .k = 3},
                                  {.n = 8, .h = 28, .w = 28, .c = 32}};
  std::uniform_int_distribution<int> level(0, 3);  // few distinct values: many ties
  for (const auto& s : shapes) {
    SCOPED_TRACE(testing::Message()
                 << "n=" << s.n << " " << s.h << "x" << s.w << "x" << s.c << " k=" << s.k);
    const size_t in_n = size_t(s.n) * s.h * s.w * s.c;
    const size_t out_n = size_t(s.n) * s.out_h() * s.out_w() * s.c;
    Floats x(in_n);
    for (float& v : x) v = static_cast<float>(level(rng_));
    const Floats dy = random_floats(out_n, rng_);
    Floats y(out_n), dx(in_n);
    std::vector<int32_t> arg(out_n);
    lk::maxpool_forward_cpu(s, x.data(), y.data(), arg.data());
    lk::maxpool_backward_cpu(s, dy.data(), arg.data(), dx.data());
    DeviceArray<float> gx(x), gy(out_n), gdy(dy), gdx(Floats(in_n, 7.0f));  // backward overwrites
    DeviceArray<int32_t> garg(out_n);
    lk::maxpool_forward_cuda(s, gx.get(), gy.get(), garg.get(), stream_);
    lk::maxpool_backward_cuda(s, gdy.get(), garg.get(), gdx.get(), stream_);
    sync();
    EXPECT_EQ(gy.download(), y);
    EXPECT_EQ(garg.download(), arg);
    EXPECT_EQ(gdx.download(), dx);
  }
}

// Bit-for-bit equality, NaNs included (operator== calls two NaNs different).
testing::AssertionResult same_bits(const Floats& got, const Floats& want) {
  if (got.size() != want.size())
    return testing::AssertionFailure() << "size " << got.size() << " != " << want.size();
  for (size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0)
      return testing::AssertionFailure() << "element " << i << ": " << got[i] << " vs " << want[i];
  return testing::AssertionSuccess();
}

TEST_F(GpuParity, ReluMatchesExactlyAlsoInPlaceAndOnSpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  // NaN must pass on as on the CPU (a GPU that maps it to 0 hides a diverging run from the NaN
  // guard); -0 stays -0; subnormals are not flushed.
  const Floats specials = {std::nanf(""),
                           -std::nanf(""),
                           inf,
                           -inf,
                           0.0f,
                           -0.0f,
                           std::numeric_limits<float>::denorm_min(),
                           -std::numeric_limits<float>::denorm_min()};
  for (size_t n : {size_t(1), size_t(1000), size_t(1) << 20}) {
    Floats x = random_floats(n, rng_);
    // Spread the special values over the vector, once each, so every launch shape sees them.
    const size_t gap = n / specials.size() + 1;
    for (size_t k = 0; k < specials.size() && k < n; ++k) x[k * gap % n] = specials[k];
    const Floats dy = random_floats(n, rng_);
    Floats y(n), dx(n);
    lk::relu_forward_cpu(x.data(), y.data(), n);
    lk::relu_backward_cpu(y.data(), dy.data(), dx.data(), n);
    DeviceArray<float> gx(x), gy(n), gdy(dy);
    lk::relu_forward_cuda(gx.get(), gy.get(), n, stream_);
    lk::relu_backward_cuda(gy.get(), gdy.get(), gdy.get(), n, stream_);  // dx aliases dy
    lk::relu_forward_cuda(gx.get(), gx.get(), n, stream_);               // y aliases x
    sync();
    EXPECT_TRUE(same_bits(gy.download(), y)) << "forward, n=" << n;
    EXPECT_TRUE(same_bits(gx.download(), y)) << "forward in place, n=" << n;
    EXPECT_TRUE(same_bits(gdy.download(), dx)) << "backward, n=" << n;
  }
  // All of them at once, each beside the others.
  DeviceArray<float> gs(specials), gout(specials.size());
  Floats want(specials.size());
  lk::relu_forward_cpu(specials.data(), want.data(), specials.size());
  lk::relu_forward_cuda(gs.get(), gout.get(), specials.size(), stream_);
  sync();
  EXPECT_TRUE(same_bits(gout.download(), want));
  EXPECT_TRUE(std::isnan(gout.download()[0])) << "NaN became a number on the GPU";
}

TEST_F(GpuParity, SoftmaxCrossEntropyLossAccuracyAndGradient) {
  struct Case {
    int batch, classes;
    bool weighted;
  };
  const Case cases[] = {
      {1, 1, false}, {7, 10, true}, {64, 10, false}, {33, 1000, true}, {5, 3000, false}};
  for (const auto& c : cases) {
    SCOPED_TRACE(testing::Message() << "batch=" << c.batch << " classes=" << c.classes);
    Floats logits = random_floats(size_t(c.batch) * c.classes, rng_, -8.0f, 8.0f);
    std::vector<int32_t> labels(c.batch);
    std::uniform_int_distribution<int32_t> pick(0, c.classes - 1);
    for (auto& l : labels) l = pick(rng_);
    Floats weights(c.batch, 1.0f);
    if (c.weighted) {
      // The last row is padding: weight 0, and non-finite logits that must not leak into the sums.
      weights.back() = 0.0f;
      logits[logits.size() - 1] = std::numeric_limits<float>::infinity();
      weights[0] = 0.5f;
    }
    const float scale = 1.0f / c.batch;
    Floats dl(logits.size());
    const lk::LossTotals want = lk::softmax_cross_entropy_cpu(logits.data(), labels.data(),
                                                              c.weighted ? weights.data() : nullptr,
                                                              c.batch, c.classes, scale, dl.data());
    DeviceArray<float> glog(logits), gw(weights), gdl(logits.size());
    DeviceArray<int32_t> glab(labels);
    const lk::LossTotals got =
        lk::softmax_cross_entropy_cuda(glog.get(), glab.get(), c.weighted ? gw.get() : nullptr,
                                       c.batch, c.classes, scale, gdl.get(), stream_);
    EXPECT_NEAR(got.loss_sum, want.loss_sum, 1e-5 * (1 + std::fabs(want.loss_sum)));
    EXPECT_EQ(got.correct, want.correct);
    EXPECT_TRUE(close(gdl.download(), dl, 1e-5));
  }
}

// bf16 logits (a bf16 run's tied head, LOCKSTEP_CUDA_LOGITS=bf16): the kernel widens each word and
// then computes as the fp32 kernel does, so on the widened logits the two give the same totals bit
// for bit and each dlogits word is the fp32 gradient rounded to bf16 (the CPU cast's bits); GPT-2's
// 50,304 classes among the shapes; padding rows and a bad label as in the fp32 kernel.
TEST_F(GpuParity, SoftmaxCrossEntropyOnBf16LogitsIsTheFp32KernelOnTheirWidening) {
  struct Case {
    int batch, classes;
  };
  for (const Case c : {Case{7, 10}, Case{33, 1000}, Case{6, 50304}}) {
    SCOPED_TRACE(testing::Message() << "batch=" << c.batch << " classes=" << c.classes);
    const size_t n = size_t(c.batch) * c.classes;
    const Floats raw = random_floats(n, rng_, -8.0f, 8.0f);
    std::vector<uint16_t> words(n);
    lk::cast_f32_to_bf16_cpu(raw.data(), words.data(), n);
    Floats widened(n);
    lk::cast_bf16_to_f32_cpu(words.data(), widened.data(), n);
    std::vector<int32_t> labels(c.batch);
    std::uniform_int_distribution<int32_t> pick(0, c.classes - 1);
    for (auto& l : labels) l = pick(rng_);
    labels[1] = c.classes;  // out of range: no loss, a zero gradient, counted
    Floats weights(c.batch, 1.0f);
    weights.back() = 0.0f;  // padding
    weights[0] = 0.5f;
    const float scale = 1.0f / c.batch;
    DeviceArray<float> g32(widened), gw(weights), gd32(n);
    DeviceArray<uint16_t> g16(words), gd16(std::vector<uint16_t>(n, 0x7fc0));
    DeviceArray<int32_t> glab(labels);
    DeviceArray<lk::LossTotals> sums(2);
    lk::cuda_zero(sums.get(), 2 * sizeof(lk::LossTotals), stream_);
    lk::softmax_cross_entropy_sums_cuda(g32.get(), glab.get(), gw.get(), c.batch, c.classes, scale,
                                        gd32.get(), sums.get(), stream_);
    lk::softmax_cross_entropy_bf16_sums_cuda(g16.get(), glab.get(), gw.get(), c.batch, c.classes,
                                             scale, gd16.get(), sums.get() + 1, stream_);
    sync();
    const std::vector<lk::LossTotals> t = sums.download();
    EXPECT_EQ(t[1].loss_sum, t[0].loss_sum);
    EXPECT_EQ(t[1].correct, t[0].correct);
    EXPECT_EQ(t[1].invalid_labels, 1.0);
    EXPECT_EQ(t[0].invalid_labels, 1.0);
    const Floats d32 = gd32.download();
    std::vector<uint16_t> want(n);
    lk::cast_f32_to_bf16_cpu(d32.data(), want.data(), n);
    const std::vector<uint16_t> got = gd16.download();
    size_t differ = 0;
    for (size_t i = 0; i < n; ++i) differ += got[i] != want[i];
    EXPECT_EQ(differ, 0u) << "dlogits words that are not the fp32 gradient's bf16 rounding";
    for (int j = 0; j < c.classes; ++j) {
      ASSERT_EQ(got[size_t(1) * c.classes + j], 0u) << "the bad label's row";
      ASSERT_EQ(got[size_t(c.batch - 1) * c.classes + j], 0u) << "the padding row";
    }
  }
}

// The bf16-output product (the tied head's logits in bf16) against the fp32-output one on the same
// operands: each word within bf16 rounding of the fp32 sum (two roundings, as cuBLAS may reduce a
// split-K product's partial sums in the output type, plus another order of addition: 4e-3 of the
// result's scale); a transposed or misplaced operand would be off by the scale itself; beta other
// than 0 refused.
TEST_F(GpuParity, Bf16GemmWithBf16OutputRoundsTheFp32Sums) {
  const lk::GemmShape shapes[] = {
      {.m = 16, .n = 16, .k = 16},
      {.m = 96, .n = 50304 / 16, .k = 64, .trans_b = true},
      {.m = 33, .n = 70, .k = 257, .trans_a = true},
  };
  for (const auto& s : shapes) {
    SCOPED_TRACE(testing::Message() << "m=" << s.m << " n=" << s.n << " k=" << s.k);
    const Floats a = random_floats(size_t(s.m) * s.k, rng_);
    const Floats b = random_floats(size_t(s.k) * s.n, rng_);
    std::vector<uint16_t> a16(a.size()), b16(b.size());
    lk::cast_f32_to_bf16_cpu(a.data(), a16.data(), a.size());
    lk::cast_f32_to_bf16_cpu(b.data(), b16.data(), b.size());
    DeviceArray<uint16_t> da(a16), db(b16), dc16(size_t(s.m) * s.n);
    DeviceArray<float> dc(size_t(s.m) * s.n);
    lk::gemm_bf16_cuda(s, da.get(), db.get(), dc.get(), stream_);
    lk::gemm_bf16_out_cuda(s, da.get(), db.get(), dc16.get(), stream_);
    sync();
    const Floats want = dc.download();
    const std::vector<uint16_t> words = dc16.download();
    Floats got(words.size());
    lk::cast_bf16_to_f32_cpu(words.data(), got.data(), words.size());
    double scale = 0;
    for (float v : want) scale = std::max(scale, double(std::fabs(v)));
    size_t off = 0;
    for (size_t i = 0; i < got.size(); ++i)
      off += std::fabs(double(got[i]) - want[i]) >
             std::ldexp(std::fabs(double(want[i])), -7) + 4e-3 * scale;
    EXPECT_EQ(off, 0u) << "words farther than one bf16 rounding from the fp32 product";
  }
  DeviceArray<uint16_t> x(std::vector<uint16_t>(4, 0));
  EXPECT_THROW(lk::gemm_bf16_out_cuda({.m = 2, .n = 2, .k = 2, .beta = 1.0f}, x.get(), x.get(),
                                      x.get(), stream_),
               std::invalid_argument);
}

TEST_F(GpuParity, LossTotalsAccumulateOnTheDeviceAndCountBadLabels) {
  const int batch = 16, classes = 10;
  const Floats logits = random_floats(batch * classes, rng_, -4.0f, 4.0f);
  std::vector<int32_t> labels(batch, 3);
  const lk::LossTotals one = lk::softmax_cross_entropy_cpu(logits.data(), labels.data(), nullptr,
                                                           batch, classes, 1.0f, nullptr);
  DeviceArray<float> glog(logits), gdl(Floats(batch * classes, 5.0f));
  DeviceArray<int32_t> glab(labels);
  DeviceArray<lk::LossTotals> sums(1);
  lk::cuda_zero(sums.get(), sizeof(lk::LossTotals), stream_);
  for (int step = 0; step < 3; ++step)
    lk::softmax_cross_entropy_sums_cuda(glog.get(), glab.get(), nullptr, batch, classes, 1.0f,
                                        nullptr, sums.get(), stream_);
  sync();
  const lk::LossTotals three = sums.download()[0];
  EXPECT_NEAR(three.loss_sum, 3 * one.loss_sum, 1e-5 * (1 + 3 * one.loss_sum));
  EXPECT_EQ(three.correct, 3 * one.correct);
  EXPECT_EQ(three.invalid_labels, 0);

  labels[4] = classes;  // out of range
  labels[9] = -1;
  DeviceArray<int32_t> gbad(labels);
  EXPECT_THROW(lk::softmax_cross_entropy_cuda(glog.get(), gbad.get(), nullptr, batch, classes, 1.0f,
                                              gdl.get(), stream_),
               std::out_of_range);
  const Floats d = gdl.download();
  for (int j = 0; j < classes; ++j)
    EXPECT_EQ(d[4 * classes + j], 0.0f) << "a row with a bad label gets no gradient";
}

TEST_F(GpuParity, MseLossAndGradient) {
  const std::pair<int, int> shapes[] = {{8, 1}, {32, 10}, {5, 700}};
  for (const auto& [batch, dim] : shapes) {
    SCOPED_TRACE(testing::Message() << "batch=" << batch << " dim=" << dim);
    const Floats pred = random_floats(size_t(batch) * dim, rng_);
    const Floats target = random_floats(pred.size(), rng_);
    Floats weights = random_floats(batch, rng_, 0.0f, 1.0f);
    weights[0] = 0.0f;
    Floats dp(pred.size());
    const lk::LossTotals want =
        lk::mse_cpu(pred.data(), target.data(), weights.data(), batch, dim, 0.25f, dp.data());
    DeviceArray<float> gp(pred), gt(target), gw(weights), gdp(pred.size());
    const lk::LossTotals got =
        lk::mse_cuda(gp.get(), gt.get(), gw.get(), batch, dim, 0.25f, gdp.get(), stream_);
    EXPECT_NEAR(got.loss_sum, want.loss_sum, 1e-9 * (1 + want.loss_sum));
    EXPECT_TRUE(close(gdp.download(), dp, 1e-6));
  }
}

TEST_F(GpuParity, SgdAndAdamUpdatesOverSeveralSteps) {
  const lk::SgdOptions sgds[] = {
      {.lr = 0.1f},
      {.lr = 0.05f, .momentum = 0.9f, .weight_decay = 1e-3f},
      {.lr = 0.05f, .momentum = 0.9f, .weight_decay = 1e-3f, .nesterov = true}};
  const size_t n = (size_t(1) << 20) + 3;
  for (const auto& o : sgds) {
    SCOPED_TRACE(testing::Message() << "sgd momentum=" << o.momentum << " nesterov=" << o.nesterov);
    Floats p = random_floats(n, rng_), v(n, 0.0f);
    DeviceArray<float> gp(p), gv(v);
    for (int step = 0; step < 4; ++step) {
      const Floats g = random_floats(n, rng_);
      DeviceArray<float> gg(g);
      lk::sgd_update_cpu(o, p.data(), g.data(), v.data(), n);
      lk::sgd_update_cuda(o, gp.get(), gg.get(), gv.get(), n, stream_);
    }
    sync();
    EXPECT_TRUE(close(gp.download(), p, 1e-5));
    EXPECT_TRUE(close(gv.download(), v, 1e-5));
  }
  for (bool decoupled : {false, true}) {
    for (int64_t first : {int64_t(1), int64_t(1000)}) {
      SCOPED_TRACE(testing::Message() << "adam decoupled=" << decoupled << " step=" << first);
      Floats p = random_floats(n, rng_), m(n, 0.0f), v(n, 0.0f);
      DeviceArray<float> gp(p), gm(m), gv(v);
      for (int64_t step = first; step < first + 4; ++step) {
        const lk::AdamOptions o{
            .lr = 1e-2f, .weight_decay = 0.01f, .decoupled = decoupled, .step = step};
        const Floats g = random_floats(n, rng_);
        DeviceArray<float> gg(g);
        lk::adam_update_cpu(o, p.data(), g.data(), m.data(), v.data(), n);
        lk::adam_update_cuda(o, gp.get(), gg.get(), gm.get(), gv.get(), n, stream_);
      }
      sync();
      EXPECT_TRUE(close(gp.download(), p, 1e-5));
      EXPECT_TRUE(close(gm.download(), m, 1e-5));
      EXPECT_TRUE(close(gv.download(), v, 1e-5));
    }
  }
}

// A bf16 run's one weight copy (Model::params16): each update, plain, momentum, Adam and captured
// (gated), writes the bf16 words of the parameters it updates in the same pass: the words the cast
// kernel gives from them, and the parameters and state the same bits as an update without the copy.
// A gated update that a non-finite value stops leaves the words too.
TEST_F(GpuParity, UpdatesWriteTheBf16WordsOfTheirParametersInTheSamePass) {
  const size_t n = (size_t(1) << 18) + 5;
  using Words = std::vector<uint16_t>;
  auto cast = [&](const Floats& p) {
    Words w(p.size());
    lk::cast_f32_to_bf16_cpu(p.data(), w.data(), p.size());
    return w;
  };
  const Floats p0 = random_floats(n, rng_), g = random_floats(n, rng_);
  for (int kind = 0; kind < 4; ++kind) {
    SCOPED_TRACE(testing::Message() << "kind " << kind);  // sgd, momentum, adamw, gated adamw
    DeviceArray<float> plain(p0), with(p0), grad(g), a0(n), a1(n), b0(n), b1(n);
    const Words stale(n, 0x7fc0);
    DeviceArray<uint16_t> words(stale);
    const lk::SgdOptions sgd{.lr = 0.05f, .momentum = kind == 1 ? 0.9f : 0.0f};
    const lk::AdamOptions adam{.lr = 1e-2f, .weight_decay = 0.1f, .decoupled = true, .step = 3};
    const lk::UpdateCoefficients c = lk::adam_coefficients(adam);
    DeviceArray<unsigned char> coefficients(
        std::vector<unsigned char>(reinterpret_cast<const unsigned char*>(&c),
                                   reinterpret_cast<const unsigned char*>(&c) + sizeof c));
    const auto* dc = reinterpret_cast<const lk::UpdateCoefficients*>(coefficients.get());
    DeviceArray<double> gate(std::vector<double>{1.0, 2.0});
    for (int step = 0; step < 2; ++step) {
      if (kind < 2) {
        lk::sgd_update_cuda(sgd, plain.get(), grad.get(), a0.get(), n, stream_);
        lk::sgd_update_cuda(sgd, with.get(), grad.get(), a1.get(), n, stream_, words.get());
      } else if (kind == 2) {
        lk::adam_update_cuda(adam, plain.get(), grad.get(), a0.get(), b0.get(), n, stream_);
        lk::adam_update_cuda(adam, with.get(), grad.get(), a1.get(), b1.get(), n, stream_,
                             words.get());
      } else {
        lk::gated_update_cuda(dc, gate.get(), 2, plain.get(), grad.get(), a0.get(), b0.get(), n,
                              stream_);
        lk::gated_update_cuda(dc, gate.get(), 2, with.get(), grad.get(), a1.get(), b1.get(), n,
                              stream_, words.get());
      }
    }
    sync();
    const Floats p = with.download();
    EXPECT_TRUE(same_bits(p, plain.download()));
    EXPECT_TRUE(same_bits(a1.download(), a0.download()));
    EXPECT_TRUE(same_bits(b1.download(), b0.download()));
    EXPECT_FALSE(same_bits(p, p0)) << "the updates moved the parameters";
    EXPECT_EQ(words.download(), cast(p));
    if (kind != 3) continue;
    gate.upload({1.0, std::nan("")});
    const Words before = words.download();
    lk::gated_update_cuda(dc, gate.get(), 2, with.get(), grad.get(), a1.get(), b1.get(), n, stream_,
                          words.get());
    sync();
    EXPECT_TRUE(same_bits(with.download(), p)) << "a stopped update";
    EXPECT_EQ(words.download(), before) << "a stopped update";
  }
}

TEST_F(GpuParity, GlobalNormIsDeterministicAndClipsLikeTheCpu) {
  for (size_t n : {size_t(0), size_t(1), size_t(1000), size_t(3) << 20}) {
    SCOPED_TRACE(testing::Message() << "n=" << n);
    Floats g = random_floats(n, rng_);
    DeviceArray<float> gg(g);
    const double want = lk::global_norm_cpu(g.data(), n);
    const double got = lk::global_norm_cuda(gg.get(), n, stream_);
    EXPECT_NEAR(got, want, 1e-10 * want);
    EXPECT_EQ(lk::global_norm_cuda(gg.get(), n, stream_), got) << "same bits on every call";
    if (n == 0) continue;
    // Clip to half the norm, once through the host value and once with the norm kept on the GPU.
    const double max_norm = want / 2;
    DeviceArray<float> gg2(g);
    DeviceArray<double> norm(1);
    const double before = lk::clip_by_global_norm_cuda(gg.get(), n, max_norm, stream_);
    lk::global_norm_device_cuda(gg2.get(), n, norm.get(), stream_);
    lk::clip_by_device_norm_cuda(gg2.get(), n, norm.get(), max_norm, stream_);
    lk::clip_by_global_norm_cpu(g.data(), n, max_norm);
    sync();
    EXPECT_EQ(before, got);
    EXPECT_TRUE(close(gg.download(), g, 1e-6));
    EXPECT_EQ(gg2.download(), gg.download());
    // Above the norm nothing changes; scale_cuda is one multiply, exact.
    const Floats clipped = gg.download();
    lk::clip_by_global_norm_cuda(gg.get(), n, 10 * want, stream_);
    lk::scale_cuda(gg2.get(), n, 0.5f, stream_);
    lk::scale_cpu(g.data(), n, 0.5f);
    sync();
    EXPECT_EQ(gg.download(), clipped);
    EXPECT_TRUE(close(gg2.download(), g, 1e-6));
  }
}

// One training step of conv3x3(6) -> relu -> maxpool2 -> dense(10) -> softmax xent -> SGD with
// momentum, with all parameters and gradients in one flat buffer each (as the runtime lays them
// out). Each of three steps starts both twins from the CPU's state, so the test checks one step's
// parity rather than how rounding differences grow over many steps. SGD, not Adam: one Adam step
// moves every weight by about lr whatever its gradient, so a gradient near 0 whose sign rounding
// flips would move a weight by 2 lr and fail the comparison spuriously; SGD moves it in proportion
// to the gradient.
struct TinyCnn {
  static constexpr int kBatch = 4, kSide = 12, kChannels = 2, kFilters = 6, kClasses = 10;
  lk::Conv2dShape conv{.n = kBatch, .h = kSide, .w = kSide, .c_in = kChannels, .c_out = kFilters};
  lk::PoolShape pool{.n = kBatch, .h = kSide, .w = kSide, .c = kFilters, .k = 2};
  lk::DenseShape dense{
      .batch = kBatch, .in = (kSide / 2) * (kSide / 2) * kFilters, .out = kClasses};
  size_t conv_w = 0, conv_b = size_t(9) * kChannels * kFilters, dense_w = conv_b + kFilters,
         dense_b = dense_w + size_t(dense.in) * kClasses, params = dense_b + kClasses;
  size_t act = size_t(kBatch) * kSide * kSide * kFilters, pooled = size_t(kBatch) * dense.in;
};

TEST_F(GpuParity, WholeTrainingStepOfASmallCnn) {
  const TinyCnn net;
  const Floats images =
      random_floats(size_t(net.kBatch) * net.kSide * net.kSide * net.kChannels, rng_);
  std::vector<int32_t> labels = {3, 1, 4, 1};
  Floats params = random_floats(net.params, rng_, -0.3f, 0.3f);
  Floats grads(net.params), velocity(net.params, 0.0f);
  Floats work(lk::conv2d_workspace_floats(net.conv)), a1(net.act), a2(net.pooled), logits(40),
      dlogits(40), d2(net.pooled), d1(net.act);
  std::vector<int32_t> arg(net.pooled);
  DeviceArray<float> g_images(images), g_params(params), g_grads(net.params), g_velocity(velocity),
      g_work(work.size()), g_a1(net.act), g_a2(net.pooled), g_logits(40), g_dlogits(40),
      g_d2(net.pooled), g_d1(net.act);
  DeviceArray<int32_t> g_labels(labels), g_arg(net.pooled);
  const float scale = 1.0f / net.kBatch;
  for (int64_t step = 1; step <= 3; ++step) {
    SCOPED_TRACE(testing::Message() << "step " << step);
    const lk::SgdOptions sgd{.lr = 0.1f, .momentum = 0.9f, .weight_decay = 1e-4f};
    g_params.upload(params);
    g_velocity.upload(velocity);
    // CPU.
    float* p = params.data();
    float* g = grads.data();
    std::fill(grads.begin(), grads.end(), 0.0f);
    lk::conv2d_forward_cpu(net.conv, images.data(), p + net.conv_w, p + net.conv_b, a1.data(),
                           work.data());
    lk::relu_forward_cpu(a1.data(), a1.data(), net.act);
    lk::maxpool_forward_cpu(net.pool, a1.data(), a2.data(), arg.data());
    lk::dense_forward_cpu(net.dense, a2.data(), p + net.dense_w, p + net.dense_b, logits.data());
    const lk::LossTotals want = lk::softmax_cross_entropy_cpu(
        logits.data(), labels.data(), nullptr, net.kBatch, net.kClasses, scale, dlogits.data());
    lk::dense_backward_cpu(net.dense, a2.data(), p + net.dense_w, dlogits.data(), d2.data(),
                           g + net.dense_w, g + net.dense_b);
    lk::maxpool_backward_cpu(net.pool, d2.data(), arg.data(), d1.data());
    lk::relu_backward_cpu(a1.data(), d1.data(), d1.data(), net.act);
    lk::conv2d_backward_cpu(net.conv, images.data(), p + net.conv_w, d1.data(), nullptr,
                            g + net.conv_w, g + net.conv_b, work.data());
    lk::sgd_update_cpu(sgd, p, g, velocity.data(), net.params);
    // GPU, the same sequence.
    p = g_params.get();
    g = g_grads.get();
    lk::cuda_zero(g, net.params * sizeof(float), stream_);
    lk::conv2d_forward_cuda(net.conv, g_images.get(), p + net.conv_w, p + net.conv_b, g_a1.get(),
                            g_work.get(), stream_);
    lk::relu_forward_cuda(g_a1.get(), g_a1.get(), net.act, stream_);
    lk::maxpool_forward_cuda(net.pool, g_a1.get(), g_a2.get(), g_arg.get(), stream_);
    lk::dense_forward_cuda(net.dense, g_a2.get(), p + net.dense_w, p + net.dense_b, g_logits.get(),
                           stream_);
    const lk::LossTotals got =
        lk::softmax_cross_entropy_cuda(g_logits.get(), g_labels.get(), nullptr, net.kBatch,
                                       net.kClasses, scale, g_dlogits.get(), stream_);
    lk::dense_backward_cuda(net.dense, g_a2.get(), p + net.dense_w, g_dlogits.get(), g_d2.get(),
                            g + net.dense_w, g + net.dense_b, stream_);
    lk::maxpool_backward_cuda(net.pool, g_d2.get(), g_arg.get(), g_d1.get(), stream_);
    lk::relu_backward_cuda(g_a1.get(), g_d1.get(), g_d1.get(), net.act, stream_);
    lk::conv2d_backward_cuda(net.conv, g_images.get(), p + net.conv_w, g_d1.get(), nullptr,
                             g + net.conv_w, g + net.conv_b, g_work.get(), stream_);
    lk::sgd_update_cuda(sgd, p, g, g_velocity.get(), net.params, stream_);
    sync();
    EXPECT_NEAR(got.loss_sum, want.loss_sum, 1e-4 * (1 + want.loss_sum));
    EXPECT_EQ(got.correct, want.correct);
    EXPECT_TRUE(close(g_grads.download(), grads, 1e-4)) << "gradients";
    EXPECT_TRUE(close(g_params.download(), params, 1e-4)) << "parameters";
  }
}

}  // namespace
