// bf16 compute on the GPU against the fp32 CPU kernels, the oracle: dense and conv2d forward and
// backward (kernels' *_bf16_cuda), then a model built with Precision::bf16. Two tolerances, from
// the arithmetic: against the CPU kernels run on the bf16-rounded operands (x, w, dy) only the
// order of fp32 additions differs (1e-3 of the result's scale: tensor-core accumulation); against
// the CPU kernels on the fp32 operands the rounding shows (1e-2). The bias gradient sums the fp32
// dy and must match as an fp32 sum. Every test skips, with the reason, where no GPU answers or the
// build has no CUDA.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <vector>

#include "gpu_parity.h"
#include "kernels/cast.h"
#include "kernels/conv/conv2d.h"
#include "kernels/dense.h"
#include "runtime/model/model.h"

namespace lk = lockstep::kernels;
using namespace lockstep::testing_util;

namespace {

// The value each element has once rounded to bf16 (what the bf16 GEMMs multiply).
Floats rounded(const Floats& v) {
  std::vector<uint16_t> words(v.size());
  Floats out(v.size());
  lk::cast_f32_to_bf16_cpu(v.data(), words.data(), v.size());
  lk::cast_bf16_to_f32_cpu(words.data(), out.data(), v.size());
  return out;
}

// ||a - b|| / ||b||: one figure for a whole tensor, which a few activations that change sign
// between fp32 and bf16 (a ReLU's kink) do not dominate.
double relative_l2(const Floats& a, const Floats& b) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    norm += double(b[i]) * b[i];
  }
  return a.size() == b.size() && norm > 0 ? std::sqrt(diff / norm) : INFINITY;
}

class Bf16Parity : public GpuParity {};

// One CPU oracle of a layer's forward and backward: outputs and the accumulated gradients.
struct Pass {
  Floats y, dx, dw, db;
};

TEST_F(Bf16Parity, DenseForwardAndBackward) {
  for (const auto& s : parity_dense_shapes()) {
    for (bool bias : {true, false}) {
      SCOPED_TRACE(describe(s, bias));
      const Floats x = random_floats(size_t(s.batch) * s.in, rng_);
      const Floats w = random_floats(size_t(s.in) * s.out, rng_);
      const Floats b = random_floats(s.out, rng_);
      const Floats dy = random_floats(size_t(s.batch) * s.out, rng_);
      const Floats dw0 = random_floats(w.size(), rng_), db0 = random_floats(b.size(), rng_);
      // oracles[0]: fp32 operands; oracles[1]: the bf16-rounded operands of the GEMMs.
      Pass oracles[2];
      for (int r = 0; r < 2; ++r) {
        const Floats xr = r ? rounded(x) : x, wr = r ? rounded(w) : w, dyr = r ? rounded(dy) : dy;
        Pass& o = oracles[r];
        o.y.resize(size_t(s.batch) * s.out);
        o.dx.resize(x.size());
        o.dw = dw0;
        o.db = db0;
        lk::dense_forward_cpu(s, xr.data(), wr.data(), bias ? b.data() : nullptr, o.y.data());
        lk::dense_backward_cpu(s, xr.data(), wr.data(), dyr.data(), o.dx.data(), o.dw.data(),
                               bias ? o.db.data() : nullptr);
      }

      DeviceArray<float> gx(x), gw(w), gb(b), gdy(dy), gy(oracles[0].y.size()), gdx(x.size()),
          gdw(dw0), gdb(db0);
      DeviceArray<uint16_t> gw16(w.size()), gx16(x.size()), gdy16(dy.size());
      lk::cast_f32_to_bf16_cuda(gw.get(), gw16.get(), w.size(), stream_);
      lk::dense_forward_bf16_cuda(s, gx.get(), gw16.get(), bias ? gb.get() : nullptr, gy.get(),
                                  gx16.get(), stream_);
      lk::dense_backward_bf16_cuda(s, gx16.get(), gw16.get(), gdy.get(), gdx.get(), gdw.get(),
                                   bias ? gdb.get() : nullptr, gdy16.get(), stream_);
      sync();
      EXPECT_EQ(gx16.download(), bf16_words(x)) << "forward leaves the bf16 input for backward";
      EXPECT_EQ(gdy16.download(), bf16_words(dy)) << "backward's bf16 dy (cast with db or alone)";
      const Floats y = gy.download(), dx = gdx.download(), dw = gdw.download();
      EXPECT_TRUE(close(y, oracles[1].y, 1e-3)) << "y, bf16-rounded oracle";
      EXPECT_TRUE(close(y, oracles[0].y, 1e-2)) << "y, fp32 oracle";
      EXPECT_TRUE(close(dw, oracles[1].dw, 1e-3)) << "dw, bf16-rounded oracle";
      EXPECT_TRUE(close(dw, oracles[0].dw, 1e-2)) << "dw, fp32 oracle";
      EXPECT_TRUE(close(dx, oracles[1].dx, 1e-3)) << "dx, bf16-rounded oracle";
      EXPECT_TRUE(close(dx, oracles[0].dx, 1e-2)) << "dx, fp32 oracle";
      // The bias gradient sums the fp32 dy (oracle 0), not its rounding.
      EXPECT_TRUE(close(gdb.download(), oracles[0].db, 1e-5)) << "db";

      // dy given as bf16 words alone (dy null, as cuDNN's attention hands the qkv product its
      // gradient): the products and the bias gradient of an fp32 dy holding those words' values,
      // bit for bit.
      const Floats wide = rounded(dy);
      DeviceArray<float> gwide(wide), gdx_a(x.size()), gdw_a(dw0), gdb_a(db0), gdx_b(x.size()),
          gdw_b(dw0), gdb_b(db0);
      DeviceArray<uint16_t> words(bf16_words(dy)), scratch(dy.size());
      lk::dense_backward_bf16_cuda(s, gx16.get(), gw16.get(), gwide.get(), gdx_a.get(), gdw_a.get(),
                                   bias ? gdb_a.get() : nullptr, scratch.get(), stream_);
      lk::dense_backward_bf16_cuda(s, gx16.get(), gw16.get(), nullptr, gdx_b.get(), gdw_b.get(),
                                   bias ? gdb_b.get() : nullptr, words.get(), stream_);
      sync();
      EXPECT_EQ(gdx_b.download(), gdx_a.download()) << "dx from the words";
      EXPECT_EQ(gdw_b.download(), gdw_a.download()) << "dw from the words";
      EXPECT_EQ(gdb_b.download(), gdb_a.download()) << "db from the words";
      EXPECT_EQ(words.download(), bf16_words(dy)) << "the words are read, not written";

      // dx written in bf16 (dx16: dO for cuDNN's attention): each word within one bf16 rounding
      // of the fp32 dx, and the same weight and bias gradients.
      DeviceArray<float> gdw_c(dw0), gdb_c(db0);
      DeviceArray<uint16_t> gdx16(x.size());
      lk::dense_backward_bf16_cuda(s, gx16.get(), gw16.get(), nullptr, nullptr, gdw_c.get(),
                                   bias ? gdb_c.get() : nullptr, words.get(), stream_, gdx16.get());
      sync();
      const Floats want_dx = gdx_b.download();
      const std::vector<uint16_t> dx16 = gdx16.download();
      Floats got_dx(dx16.size());
      lk::cast_bf16_to_f32_cpu(dx16.data(), got_dx.data(), got_dx.size());
      EXPECT_TRUE(close(got_dx, want_dx, 1e-2)) << "dx in bf16";
      EXPECT_EQ(gdw_c.download(), gdw_b.download()) << "dw beside dx in bf16";
      EXPECT_EQ(gdb_c.download(), gdb_b.download()) << "db beside dx in bf16";
    }
  }
}

// The CPU oracles of a bf16 convolution: [0] on the fp32 operands, [1] on x, w and dy rounded to
// bf16 (what the bf16 kernels multiply).
std::array<ConvResult, 2> conv_oracles(const lk::Conv2dShape& s, const ConvCase& c,
                                       bool with_dx = true) {
  return {cpu_conv(s, c, with_dx),
          cpu_conv(s, c, rounded(c.x), rounded(c.w), rounded(c.dy), with_dx)};
}

TEST_F(Bf16Parity, Conv2dForwardAndBackwardForAnyGeometry) {
  for (const auto& s : parity_conv_shapes()) {
    SCOPED_TRACE(describe(s));
    const ConvCase c(s, rng_);
    const auto oracles = conv_oracles(s, c);
    const size_t ws = lk::conv2d_bf16_workspace_floats(s);
    DeviceArray<float> gx(c.x), gw(c.w), gb(c.b), gdy(c.dy), gy(c.dy.size()), gdx(c.x.size()),
        gdw(c.dw0), gdb(c.db0), gwork(ws), gdw_first(c.dw0);
    DeviceArray<uint16_t> gw16(c.w.size());
    lk::cast_f32_to_bf16_cuda(gw.get(), gw16.get(), c.w.size(), stream_);
    lk::conv2d_forward_bf16_cuda(s, gx.get(), gw16.get(), gb.get(), gy.get(), gwork.get(), stream_);
    lk::conv2d_backward_bf16_cuda(s, gx.get(), gw16.get(), gdy.get(), gdx.get(), gdw.get(),
                                  gdb.get(), gwork.get(), stream_);
    // A first layer passes no dx: dw must not depend on it.
    lk::conv2d_backward_bf16_cuda(s, gx.get(), gw16.get(), gdy.get(), nullptr, gdw_first.get(),
                                  nullptr, gwork.get(), stream_);
    sync();
    const Floats y = gy.download(), dx = gdx.download(), dw = gdw.download();
    EXPECT_TRUE(close(y, oracles[1].y, 1e-3)) << "y, bf16-rounded oracle";
    EXPECT_TRUE(close(y, oracles[0].y, 1e-2)) << "y, fp32 oracle";
    EXPECT_TRUE(close(dx, oracles[1].dx, 1e-3)) << "dx, bf16-rounded oracle";
    EXPECT_TRUE(close(dx, oracles[0].dx, 1e-2)) << "dx, fp32 oracle";
    EXPECT_TRUE(close(dw, oracles[1].dw, 1e-3)) << "dw, bf16-rounded oracle";
    EXPECT_TRUE(close(dw, oracles[0].dw, 1e-2)) << "dw, fp32 oracle";
    EXPECT_EQ(gdw_first.download(), dw) << "dw without dx";
    EXPECT_TRUE(close(gdb.download(), oracles[0].db, 1e-4)) << "db";
  }
}

// The direct kernels in bf16: x, w and dy rounded where read, fp32 sums and outputs, so against
// the oracle on rounded operands only the order of fp32 additions differs (1e-4); the bias
// gradient sums the fp32 dy.
TEST_F(Bf16Parity, DirectConv2dForwardAndFilterGradient) {
  const lk::Conv2dShape shapes[] = {{.n = 2, .h = 5, .w = 5, .c_in = 1, .c_out = 3},
                                    {.n = 37, .h = 28, .w = 28, .c_in = 1, .c_out = 32},
                                    {.n = 3, .h = 8, .w = 7, .c_in = 3, .c_out = 8, .stride = 2}};
  for (const auto& s : shapes) {
    SCOPED_TRACE(describe(s));
    ASSERT_TRUE(lk::conv2d_direct_supported(s));
    const ConvCase c(s, rng_);
    const auto oracles = conv_oracles(s, c, /*with_dx=*/false);
    DeviceArray<float> gx(c.x), gw(c.w), gb(c.b), gdy(c.dy), gy(c.dy.size()), gdw(c.dw0),
        gdb(c.db0), gwork(lk::conv2d_direct_workspace_floats(s));
    lk::conv2d_forward_direct_cuda(s, gx.get(), gw.get(), gb.get(), gy.get(), true, stream_);
    lk::conv2d_filter_direct_cuda(s, gx.get(), gdy.get(), gdw.get(), gdb.get(), gwork.get(), true,
                                  stream_);
    sync();
    EXPECT_TRUE(close(gy.download(), oracles[1].y, 1e-4)) << "y, bf16-rounded oracle";
    EXPECT_TRUE(close(gdw.download(), oracles[1].dw, 1e-4)) << "dw, bf16-rounded oracle";
    EXPECT_TRUE(close(gdb.download(), oracles[0].db, 1e-4)) << "db, fp32 oracle";
  }
}

// cuDNN's bf16 twin: its outputs (y before the bias, dx, dw before it is added) are bf16 words, so
// against the bf16-rounded oracle each element also carries one rounding to bf16 (up to 2^-8 of
// its size: 5e-3 of the scale), and against the fp32 oracle that rounding adds to the operands'
// (2e-2).
TEST_F(Bf16Parity, CudnnConv2dForwardAndBackwardForAnyGeometry) {
  if (!lk::conv2d_cudnn_available()) GTEST_SKIP() << "this build has no cuDNN";
  bool relu = true;
  for (auto s : parity_conv_shapes()) {
    s.relu = relu = !relu;
    SCOPED_TRACE(describe(s) + (s.relu ? " relu" : ""));
    const ConvCase c(s, rng_);
    const auto oracles = conv_oracles(s, c);
    const size_t ws = lk::conv2d_cudnn_workspace_floats(s, true);
    DeviceArray<float> gx(c.x), gw(c.w), gb(c.b), gdy(c.dy), gy(c.dy.size()), gdx(c.x.size()),
        gdw(c.dw0), gdb(c.db0), gwork(ws), gdw_first(c.dw0);
    DeviceArray<uint16_t> gwk16(c.w.size());
    lk::conv2d_weights_krsc_bf16_cuda(s, gw.get(), gwk16.get(), stream_);
    lk::conv2d_forward_bf16_cudnn(s, gx.get(), gwk16.get(), gb.get(), gy.get(), gwork.get(),
                                  stream_);
    lk::conv2d_backward_bf16_cudnn(s, gx.get(), gwk16.get(), gdy.get(), gdx.get(), gdw.get(),
                                   gdb.get(), gwork.get(), stream_);
    lk::conv2d_backward_bf16_cudnn(s, gx.get(), gwk16.get(), gdy.get(), nullptr, gdw_first.get(),
                                   nullptr, gwork.get(), stream_);
    sync();
    const Floats y = gy.download(), dx = gdx.download(), dw = gdw.download();
    EXPECT_TRUE(close(y, oracles[1].y, 5e-3)) << "y, bf16-rounded oracle";
    EXPECT_TRUE(close(y, oracles[0].y, 2e-2)) << "y, fp32 oracle";
    EXPECT_TRUE(close(dx, oracles[1].dx, 5e-3)) << "dx, bf16-rounded oracle";
    EXPECT_TRUE(close(dx, oracles[0].dx, 2e-2)) << "dx, fp32 oracle";
    EXPECT_TRUE(close(dw, oracles[1].dw, 5e-3)) << "dw, bf16-rounded oracle";
    EXPECT_TRUE(close(dw, oracles[0].dw, 2e-2)) << "dw, fp32 oracle";
    EXPECT_EQ(gdw_first.download(), dw) << "dw without dx";
    EXPECT_TRUE(close(gdb.download(), oracles[0].db, 1e-4)) << "db";
  }
}

// A bf16 model on the GPU follows a CPU fp32 model with the same parameters through forward and
// backward, and sees parameters written between two forwards (its bf16 weight copy is not stale).
// Four GEMM layers compound their roundings (about 0.3% each, forward and backward), hence 3e-2;
// a stale or misplaced weight copy is off by order 1.
TEST_F(Bf16Parity, ModelFollowsTheCpuModelAndNewParameters) {
  using namespace lockstep;
  const ModelSpec spec =
      parse_model_spec("conv3x3:8,relu,maxpool2,conv3x3:4,relu,flatten,dense:16,relu,dense");
  const SampleShape input{8, 8, 2};
  const int outputs = 5, batch = 6;
  Model cpu(spec, input, outputs, batch);
  Model gpu(spec, input, outputs, batch, {DeviceKind::cuda, stream_, Precision::bf16});
  const Floats x = random_floats(size_t(batch) * cpu.input_size(), rng_);
  const Floats dout = random_floats(size_t(batch) * outputs, rng_);
  DeviceArray<float> gx(x);
  Floats last_out;
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(round == 0 ? "initial parameters" : "parameters written after a forward");
    if (round == 0) {
      cpu.init_params(11);
      gpu.init_params(11);
    } else {
      const Floats p = random_floats(cpu.param_count(), rng_, -0.5f, 0.5f);
      cpu.write_params(0, p.data(), p.size());
      gpu.write_params(0, p.data(), p.size());
    }
    cpu.zero_grads();
    gpu.zero_grads();
    const float* want_out = cpu.forward(x.data(), batch);
    const Floats want(want_out, want_out + size_t(batch) * outputs);
    const float* got_out = gpu.forward(gx.get(), batch);
    std::copy(dout.begin(), dout.end(), cpu.output_grad());
    lk::cuda_copy_to_device(gpu.output_grad(), dout.data(), dout.size() * sizeof(float));
    cpu.backward(batch);
    gpu.backward(batch);
    sync();
    Floats got(want.size()), grads(gpu.param_count());
    lk::cuda_copy_to_host(got.data(), got_out, got.size() * sizeof(float));
    lk::cuda_copy_to_host(grads.data(), gpu.grads(), grads.size() * sizeof(float));
    EXPECT_LT(relative_l2(got, want), 3e-2) << "outputs";
    EXPECT_LT(relative_l2(grads, Floats(cpu.grads(), cpu.grads() + cpu.param_count())), 3e-2)
        << "gradients";
    // Outputs of the old parameters would be far off: the check above can see a stale copy.
    if (round == 1) {
      EXPECT_GT(relative_l2(last_out, want), 0.1) << "new parameters, same outputs";
    }
    last_out = want;
  }
}

}  // namespace
