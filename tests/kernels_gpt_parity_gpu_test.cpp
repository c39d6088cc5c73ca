// Parity of the GPT kernels' CUDA twins (embedding, layer norm, GELU, attention, residual) with
// their CPU twins, the oracle: random inputs at a few shapes including a GPT-2-small-like block
// slice, forward and backward, parameter gradients starting non-zero (they accumulate). Tolerances
// follow the arithmetic: copies and selects exactly (the embedding forward, the zeros above the
// attention diagonal, the residual add); elementwise transcendental functions within a few ulps
// (1e-6: CUDA's tanhf and expf are not glibc's); sums in another order 1e-5, GEMM-based products
// 1e-4 of the result's scale. Every test skips, with the reason, where no GPU answers or the build
// has no CUDA.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "gpu_parity.h"
#include "kernels/cast.h"
#include "kernels/dense.h"
#include "kernels/gemm.h"
#include "kernels/gpt/attention.h"
#include "kernels/gpt/attention_cudnn.h"
#include "kernels/gpt/attention_flash.h"
#include "kernels/gpt/embedding.h"
#include "kernels/gpt/gelu.h"
#include "kernels/gpt/layernorm.h"
#include "kernels/gpt/residual.h"

namespace lk = lockstep::kernels;
using namespace lockstep::testing_util;

namespace {

// The backward pass's dwte: each token's positions summed in order from zero, that sum added to
// its row once (what the CUDA twin promises, bit for bit; the CPU adds each position straight in).
Floats dwte_by_token(const lk::EmbeddingShape& s, const std::vector<int32_t>& tok,
                     const Floats& dout, Floats dwte) {
  for (int v = 0; v < s.vocab; ++v) {
    Floats acc(size_t(s.dim), 0.0f);
    bool any = false;
    for (size_t p = 0; p < tok.size(); ++p) {
      if (tok[p] != v) continue;
      any = true;
      for (int j = 0; j < s.dim; ++j) acc[j] += dout[p * s.dim + j];
    }
    if (any)
      for (int j = 0; j < s.dim; ++j) dwte[size_t(v) * s.dim + j] += acc[j];
  }
  return dwte;
}

// Also GPT-2's vocabulary with a skewed text (half the positions one token, as spaces and common
// words are), where the tokens are grouped by sorting rather than scanned per vocabulary row.
TEST_F(GpuParity, EmbeddingForwardExactBackwardScatterAdds) {
  const lk::EmbeddingShape shapes[] = {
      {.batch = 1, .seq = 1, .vocab = 1, .max_seq = 1, .dim = 1},
      {.batch = 3, .seq = 7, .vocab = 11, .max_seq = 9, .dim = 5},
      {.batch = 8, .seq = 64, .vocab = 256, .max_seq = 64, .dim = 384},
      {.batch = 4, .seq = 512, .vocab = 50304, .max_seq = 512, .dim = 96}};
  for (const auto& s : shapes) {
    SCOPED_TRACE(testing::Message()
                 << "B=" << s.batch << " T=" << s.seq << " V=" << s.vocab << " C=" << s.dim);
    std::uniform_int_distribution<int32_t> token(0, s.vocab - 1);
    std::vector<int32_t> tok(size_t(s.batch) * s.seq);
    for (auto& t : tok) t = token(rng_);
    if (s.vocab > 256)
      for (size_t p = 0; p < tok.size(); p += 2) tok[p] = 220;
    const Floats wte = random_floats(size_t(s.vocab) * s.dim, rng_);
    const Floats wpe = random_floats(size_t(s.max_seq) * s.dim, rng_);
    const Floats dout = random_floats(tok.size() * s.dim, rng_);
    Floats out(dout.size()), dwte = random_floats(wte.size(), rng_),
                             dwpe = random_floats(wpe.size(), rng_);
    const Floats dwte0 = dwte;
    DeviceArray<int32_t> gtok(tok);
    DeviceArray<float> gwte(wte), gwpe(wpe), gdout(dout), gout(out.size()), gdwte(dwte),
        gdwpe(dwpe);
    lk::embedding_forward_cpu(s, tok.data(), wte.data(), wpe.data(), out.data());
    lk::embedding_backward_cpu(s, tok.data(), dout.data(), dwte.data(), dwpe.data());
    lk::embedding_forward_cuda(s, gtok.get(), gwte.get(), gwpe.get(), gout.get(), stream_);
    lk::embedding_backward_cuda(s, gtok.get(), gdout.get(), gdwte.get(), gdwpe.get(), stream_);
    sync();
    EXPECT_EQ(gout.download(), out);
    EXPECT_TRUE(close(gdwte.download(), dwte, 1e-5)) << "dwte";
    EXPECT_EQ(gdwte.download(), dwte_by_token(s, tok, dout, dwte0)) << "dwte's order of additions";
    EXPECT_TRUE(close(gdwpe.download(), dwpe, 1e-5)) << "dwpe";
  }
}

TEST_F(GpuParity, LayerNormForwardAndBackward) {
  // A block per row (widths 1, 33 and 2,052, a multiple of 4 just past the warps' 2,048) and a
  // warp per row (multiples of 4 up to 2,048: gpt:tiny's 128, 192 and 640 for two and six quads a
  // lane, 384, gpt:small's 768, 1,600 and 2,000, which leave some of a lane's quads unused, and
  // 2,048, sixteen quads a lane, all used).
  const lk::LayerNormShape shapes[] = {{1, 1},     {7, 33},   {5, 128},   {11, 192},
                                       {512, 384}, {13, 640}, {300, 768}, {9, 1600},
                                       {3, 2000},  {4, 2048}, {3, 2052}};
  for (const auto& s : shapes) {
    SCOPED_TRACE(testing::Message() << "rows=" << s.rows << " dim=" << s.dim);
    const Floats x = random_floats(size_t(s.rows) * s.dim, rng_, -3.0f, 5.0f);
    const Floats gamma = random_floats(s.dim, rng_), beta = random_floats(s.dim, rng_);
    const Floats dy = random_floats(x.size(), rng_);
    Floats y(x.size()), mean(s.rows), rstd(s.rows), dx(x.size()),
        dgamma = random_floats(s.dim, rng_), dbeta = random_floats(s.dim, rng_);
    DeviceArray<float> gx(x), ggamma(gamma), gbeta(beta), gdy(dy), gy(y.size()), gmean(s.rows),
        grstd(s.rows), gdx(x.size()), gdgamma(dgamma), gdbeta(dbeta);
    lk::layernorm_forward_cpu(s, x.data(), gamma.data(), beta.data(), y.data(), mean.data(),
                              rstd.data());
    lk::layernorm_backward_cpu(s, x.data(), gamma.data(), mean.data(), rstd.data(), dy.data(),
                               dx.data(), dgamma.data(), dbeta.data());
    lk::layernorm_forward_cuda(s, gx.get(), ggamma.get(), gbeta.get(), gy.get(), gmean.get(),
                               grstd.get(), stream_);
    lk::layernorm_backward_cuda(s, gx.get(), ggamma.get(), gmean.get(), grstd.get(), gdy.get(),
                                gdx.get(), gdgamma.get(), gdbeta.get(), stream_);
    sync();
    EXPECT_TRUE(close(gy.download(), y, 1e-5)) << "y";
    EXPECT_TRUE(close(gmean.download(), mean, 1e-5)) << "mean";
    EXPECT_TRUE(close(grstd.download(), rstd, 1e-5)) << "rstd";
    // dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = gamma * dy: a difference of terms
    // of size rstd * |g|, which can cancel to exactly 0 (dim 1: rstd = 1/sqrt(eps) = 316), where
    // the two sides' rounding of those terms is all that differs. Their size bounds the error.
    double terms = 0;
    for (int r = 0; r < s.rows; ++r)
      for (int i = 0; i < s.dim; ++i)
        terms = std::max(terms, std::fabs(double(rstd[r]) * gamma[i] * dy[size_t(r) * s.dim + i]));
    EXPECT_TRUE(close(gdx.download(), dx, 1e-4, 1e-5 * terms)) << "dx";
    EXPECT_TRUE(close(gdgamma.download(), dgamma, 1e-4)) << "dgamma";
    EXPECT_TRUE(close(gdbeta.download(), dbeta, 1e-5)) << "dbeta";
    // The residual branch's gradient added in the same kernel: the bits of a separate addition.
    const Floats add = random_floats(x.size(), rng_);
    DeviceArray<float> gadd(add), gdx_added(x.size());
    lk::layernorm_backward_cuda(s, gx.get(), ggamma.get(), gmean.get(), grstd.get(), gdy.get(),
                                gdx_added.get(), nullptr, nullptr, stream_, gadd.get());
    lk::residual_accumulate_cuda(gadd.get(), gdx.get(), x.size(), stream_);
    sync();
    EXPECT_EQ(gdx_added.download(), gdx.download()) << "dx + add";
    // dgamma sums the terms dy * xhat as the column pass computes them: the bits of the same
    // column sums over the terms stored first (xhat from the GPU's row statistics).
    const Floats m = gmean.download(), r = grstd.download();
    Floats dgamma_terms(x.size());
    for (int row = 0; row < s.rows; ++row)
      for (int j = 0; j < s.dim; ++j) {
        const size_t at = size_t(row) * s.dim + j;
        const float xhat = (x[at] - m[row]) * r[row];
        dgamma_terms[at] = dy[at] * xhat;
      }
    DeviceArray<float> gterms(dgamma_terms), from_terms(size_t(s.dim)), fused(size_t(s.dim));
    lk::dense_backward_cuda({s.rows, 1, s.dim}, nullptr, nullptr, gterms.get(), nullptr, nullptr,
                            from_terms.get(), stream_);
    lk::layernorm_backward_cuda(s, gx.get(), ggamma.get(), gmean.get(), grstd.get(), gdy.get(),
                                nullptr, fused.get(), nullptr, stream_);
    sync();
    EXPECT_EQ(fused.download(), from_terms.download()) << "dgamma";
    // A bf16 product's input written directly: the words of the fp32 output, without it.
    DeviceArray<uint16_t> gy16(x.size());
    lk::layernorm_forward_cuda(s, gx.get(), ggamma.get(), gbeta.get(), nullptr, gmean.get(),
                               grstd.get(), stream_, gy16.get());
    sync();
    EXPECT_EQ(gy16.download(), bf16_words(gy.download())) << "y in bf16";
  }
}

// A warp per row fixes each element's place in the sums: loading the row four floats at a time
// (16-byte aligned pointers) or one at a time (pointers that are not) gives the same bits, and so
// does a row normalised alone (the decoder's one-row calls) and within a batch.
TEST_F(GpuParity, LayerNormRowsGiveTheSameBitsWhateverTheAlignmentAndTheBatch) {
  const lk::LayerNormShape s{6, 768};
  const size_t n = size_t(s.rows) * s.dim;
  const Floats x = random_floats(n, rng_, -3.0f, 5.0f), dy = random_floats(n, rng_);
  const Floats gamma = random_floats(s.dim, rng_), beta = random_floats(s.dim, rng_);
  // Each buffer once on 16 bytes and once a float past it (the same values).
  auto shifted = [](const Floats& v) {
    Floats out(v.size() + 1, 0.0f);
    std::copy(v.begin(), v.end(), out.begin() + 1);
    return out;
  };
  DeviceArray<float> gx(x), gdy(dy), ggamma(gamma), gbeta(beta), gy(n), gmean(s.rows),
      grstd(s.rows), gdx(n);
  DeviceArray<float> ux(shifted(x)), udy(shifted(dy)), uy(n + 1), umean(s.rows), urstd(s.rows),
      udx(n + 1);
  DeviceArray<uint16_t> gy16(n), uy16(n + 1);
  lk::layernorm_forward_cuda(s, gx.get(), ggamma.get(), gbeta.get(), gy.get(), gmean.get(),
                             grstd.get(), stream_, gy16.get());
  lk::layernorm_forward_cuda(s, ux.get() + 1, ggamma.get(), gbeta.get(), uy.get() + 1, umean.get(),
                             urstd.get(), stream_, uy16.get() + 1);
  lk::layernorm_backward_cuda(s, gx.get(), ggamma.get(), gmean.get(), grstd.get(), gdy.get(),
                              gdx.get(), nullptr, nullptr, stream_);
  lk::layernorm_backward_cuda(s, ux.get() + 1, ggamma.get(), umean.get(), urstd.get(),
                              udy.get() + 1, udx.get() + 1, nullptr, nullptr, stream_);
  // Row 4 alone.
  const int r = 4;
  DeviceArray<float> one_y(size_t(s.dim)), one_mean(1), one_rstd(1);
  lk::layernorm_forward_cuda({1, s.dim}, gx.get() + size_t(r) * s.dim, ggamma.get(), gbeta.get(),
                             one_y.get(), one_mean.get(), one_rstd.get(), stream_);
  sync();
  const Floats y = gy.download(), uy_all = uy.download(), dx = gdx.download(),
               udx_all = udx.download();
  EXPECT_EQ(Floats(uy_all.begin() + 1, uy_all.end()), y) << "y, 4-byte aligned";
  EXPECT_EQ(umean.download(), gmean.download()) << "mean, 4-byte aligned";
  EXPECT_EQ(urstd.download(), grstd.download()) << "rstd, 4-byte aligned";
  const std::vector<uint16_t> y16 = gy16.download(), uy16_all = uy16.download();
  EXPECT_EQ(std::vector<uint16_t>(uy16_all.begin() + 1, uy16_all.end()), y16) << "y in bf16";
  EXPECT_EQ(y16, bf16_words(y)) << "y in bf16: the fp32 y's words";
  EXPECT_EQ(Floats(udx_all.begin() + 1, udx_all.end()), dx) << "dx, 4-byte aligned";
  EXPECT_EQ(one_y.download(), Floats(y.begin() + r * s.dim, y.begin() + (r + 1) * s.dim))
      << "a row alone";
  EXPECT_EQ(one_mean.download()[0], gmean.download()[r]);
  EXPECT_EQ(one_rstd.download()[0], grstd.download()[r]);
  // And still the function: near the CPU's.
  Floats want(n), mean(s.rows), rstd(s.rows);
  lk::layernorm_forward_cpu(s, x.data(), gamma.data(), beta.data(), want.data(), mean.data(),
                            rstd.data());
  EXPECT_TRUE(close(y, want, 1e-5)) << "y";
}

// The backward pass with both parameter gradients, for widths up to 1,024 that take a warp per row:
// dx as without them (the same bits), and dgamma and dbeta added up in the pass that computes dx
// in layernorm.cu's order (8 warps a block, each from zero over the rows b R + w + 8 i of block b
// in order, R = 8 max(4, ceil(rows / 2,048)); the warps then in the tree (0 4)(2 6) + (1 5)(3 7);
// the blocks' partials as column_sums' finish adds chunks): the bits of that order on the host,
// over the terms dy and dy * xhat (xhat from the GPU's row statistics). The same bits with
// pointers that allow only 4-byte loads, and without dx (the parameter gradients alone). Also a
// tail block, nine rows a warp and two quads a lane (192 wide).
TEST_F(GpuParity, LayerNormBackwardAddsItsParameterGradientsInTheDocumentedOrder) {
  auto in_kernel_order = [](int rows, int dim, const Floats& terms, Floats db) {
    const int per_warp = std::max(4, (rows + 2047) / 2048), per_block = 8 * per_warp;
    const int blocks = (rows + per_block - 1) / per_block;
    Floats partial(size_t(blocks) * dim);
    for (int b = 0; b < blocks; ++b)
      for (int j = 0; j < dim; ++j) {
        float v[8];
        for (int w = 0; w < 8; ++w) {
          float acc = 0.0f;
          for (int i = 0; i < per_warp; ++i) {
            const int row = b * per_block + w + 8 * i;
            if (row < rows) acc += terms[size_t(row) * dim + j];
          }
          v[w] = acc;
        }
        for (int half = 4; half > 0; half /= 2)
          for (int w = 0; w < half; ++w) v[w] += v[w + half];
        partial[size_t(b) * dim + j] = v[0];
      }
    for (int j = 0; j < dim; ++j) {
      float total = 0.0f;
      for (int lane = 0; lane < 8; ++lane) {
        float sum = 0.0f;
        for (int c = lane; c < blocks; c += 8) sum += partial[size_t(c) * dim + j];
        total += sum;
      }
      db[j] += total;
    }
    return db;
  };
  const lk::LayerNormShape shapes[] = {{5, 128}, {37, 192}, {300, 768}, {1000, 1024}, {16400, 64}};
  for (const auto& s : shapes) {
    SCOPED_TRACE(testing::Message() << "rows=" << s.rows << " dim=" << s.dim);
    const size_t n = size_t(s.rows) * s.dim;
    const Floats x = random_floats(n, rng_, -3.0f, 5.0f), dy = random_floats(n, rng_);
    const Floats gamma = random_floats(s.dim, rng_), beta = random_floats(s.dim, rng_);
    const Floats add = random_floats(n, rng_);
    const Floats dgamma0 = random_floats(s.dim, rng_), dbeta0 = random_floats(s.dim, rng_);
    DeviceArray<float> gx(x), gdy(dy), ggamma(gamma), gbeta(beta), gadd(add), gmean(s.rows),
        grstd(s.rows), gdx(n), gdx_alone(n), gdgamma(dgamma0), gdbeta(dbeta0);
    lk::layernorm_forward_cuda(s, gx.get(), ggamma.get(), gbeta.get(), nullptr, gmean.get(),
                               grstd.get(), stream_);  // the row statistics only
    lk::layernorm_backward_cuda(s, gx.get(), ggamma.get(), gmean.get(), grstd.get(), gdy.get(),
                                gdx.get(), gdgamma.get(), gdbeta.get(), stream_, gadd.get());
    lk::layernorm_backward_cuda(s, gx.get(), ggamma.get(), gmean.get(), grstd.get(), gdy.get(),
                                gdx_alone.get(), nullptr, nullptr, stream_, gadd.get());
    // x, dy and dx a float off 16 bytes: 4-byte loads.
    Floats ux(n + 1, 0.0f), udy(n + 1, 0.0f), uadd(n + 1, 0.0f);
    std::copy(x.begin(), x.end(), ux.begin() + 1);
    std::copy(dy.begin(), dy.end(), udy.begin() + 1);
    std::copy(add.begin(), add.end(), uadd.begin() + 1);
    DeviceArray<float> gux(ux), gudy(udy), guadd(uadd), gudx(n + 1), gudgamma(dgamma0),
        gudbeta(dbeta0);
    lk::layernorm_backward_cuda(s, gux.get() + 1, ggamma.get(), gmean.get(), grstd.get(),
                                gudy.get() + 1, gudx.get() + 1, gudgamma.get(), gudbeta.get(),
                                stream_, guadd.get() + 1);
    sync();
    const Floats dx = gdx.download(), m = gmean.download(), r = grstd.download();
    EXPECT_EQ(dx, gdx_alone.download()) << "dx: the bits without the parameter gradients";
    Floats terms(n);
    for (int row = 0; row < s.rows; ++row)
      for (int j = 0; j < s.dim; ++j) {
        const size_t at = size_t(row) * s.dim + j;
        const float xhat = (x[at] - m[row]) * r[row];
        terms[at] = dy[at] * xhat;
      }
    const Floats dgamma = gdgamma.download(), dbeta = gdbeta.download();
    EXPECT_EQ(dgamma, in_kernel_order(s.rows, s.dim, terms, dgamma0)) << "dgamma";
    EXPECT_EQ(dbeta, in_kernel_order(s.rows, s.dim, dy, dbeta0)) << "dbeta";
    const Floats udx = gudx.download();
    EXPECT_EQ(Floats(udx.begin() + 1, udx.end()), dx) << "dx, 4-byte loads";
    EXPECT_EQ(gudgamma.download(), dgamma) << "dgamma, 4-byte loads";
    EXPECT_EQ(gudbeta.download(), dbeta) << "dbeta, 4-byte loads";
    DeviceArray<float> gndgamma(dgamma0), gndbeta(dbeta0);
    lk::layernorm_backward_cuda(s, gx.get(), ggamma.get(), gmean.get(), grstd.get(), gdy.get(),
                                nullptr, gndgamma.get(), gndbeta.get(), stream_);
    sync();
    EXPECT_EQ(gndgamma.download(), dgamma) << "dgamma without dx";
    EXPECT_EQ(gndbeta.download(), dbeta) << "dbeta without dx";
    // And still the function: near the CPU's.
    Floats want_dx(n), want_dgamma = dgamma0, want_dbeta = dbeta0;
    lk::layernorm_backward_cpu(s, x.data(), gamma.data(), m.data(), r.data(), dy.data(),
                               want_dx.data(), want_dgamma.data(), want_dbeta.data());
    EXPECT_TRUE(close(dgamma, want_dgamma, 1e-4)) << "dgamma near the CPU's";
    EXPECT_TRUE(close(dbeta, want_dbeta, 1e-5)) << "dbeta near the CPU's";
  }
}

// The GELU's backward fused with a bf16 product's dy cast and bias-gradient sums: the same bf16
// words and the same sums (bits) as the GELU's backward, then the column sums of its output.
TEST_F(GpuParity, GeluBackwardWithColumnSums) {
  const std::pair<size_t, int> shapes[] = {{1, 1}, {37, 5}, {300, 64}, {2048, 3072}};
  for (const auto& [rows, cols] : shapes) {
    SCOPED_TRACE(testing::Message() << "rows=" << rows << " cols=" << cols);
    const size_t n = rows * cols;
    Floats x = random_floats(n, rng_, -6.0f, 6.0f);
    const Floats dy = random_floats(n, rng_);
    const Floats db0 = random_floats(size_t(cols), rng_);
    for (size_t i = 0; i < n; i += 7) x[i] *= 5.0f;  // some below -9.9: exp(-2u) overflows there
    DeviceArray<float> gx(x), gdy(dy), gdx(n), gdb(db0), gdb_fused(db0);
    DeviceArray<uint16_t> g16(n), g16_fused(n);
    lk::gelu_backward_cuda(gx.get(), gdy.get(), gdx.get(), n, stream_);
    const lk::DenseShape s{int(rows), 1, cols};
    lk::dense_backward_bf16_cuda(s, nullptr, nullptr, gdx.get(), nullptr, nullptr, gdb.get(),
                                 g16.get(), stream_);
    lk::gelu_backward_bf16_column_sums_cuda(gx.get(), gdy.get(), rows, cols, g16_fused.get(),
                                            gdb_fused.get(), stream_);
    sync();
    EXPECT_EQ(g16_fused.download(), bf16_words(gdx.download())) << "dx in bf16";
    EXPECT_EQ(gdb_fused.download(), gdb.download()) << "column sums";
  }
}

// Pre-activations far out on both sides: exp(-2u) overflows a float below x = -9.9, where the
// GELU is 0 and so is its slope; the backward passes (fp32, and bf16 with the column sums, from
// fp32 and bf16 pre-activations) must say so, not 0 * inf = NaN. Each value on its own scale.
TEST_F(GpuParity, GeluFarOutOnBothSides) {
  const Floats x = {-1e4f, -100.0f, -20.0f, -10.0f, -9.9f, -9.0f, 9.0f, 10.0f, 20.0f, 100.0f, 1e4f};
  const size_t n = x.size();
  const Floats dy(n, 0.75f);
  Floats y(n), dx(n);
  lk::gelu_forward_cpu(x.data(), y.data(), n);
  lk::gelu_backward_cpu(x.data(), dy.data(), dx.data(), n);
  DeviceArray<float> gx(x), gdy(dy), gy(n), gdx(n), gdb(n), gdb16(n);
  DeviceArray<uint16_t> gx16(bf16_words(x)), g16(n), g16_from16(n);
  lk::gelu_forward_cuda(gx.get(), gy.get(), n, stream_);
  lk::gelu_backward_cuda(gx.get(), gdy.get(), gdx.get(), n, stream_);
  lk::gelu_backward_bf16_column_sums_cuda(gx.get(), gdy.get(), 1, int(n), g16.get(), gdb.get(),
                                          stream_);
  lk::gelu_backward_bf16_column_sums_cuda(gx16.get(), gdy.get(), 1, int(n), g16_from16.get(),
                                          gdb16.get(), stream_);
  sync();
  const Floats got_y = gy.download(), got_dx = gdx.download(), got_db = gdb.download(),
               got_db16 = gdb16.download();
  for (size_t i = 0; i < n; ++i) {
    SCOPED_TRACE(testing::Message() << "x=" << x[i]);
    EXPECT_NEAR(got_y[i], y[i], 1e-6 * std::fabs(y[i]) + 1e-30) << "y";
    EXPECT_NEAR(got_dx[i], dx[i], 1e-6) << "dx";
    EXPECT_EQ(got_db[i], got_dx[i]) << "one row's column sums: dx itself";
    EXPECT_NEAR(got_db16[i], dx[i], 1e-6) << "from the bf16 pre-activation";
  }
  EXPECT_EQ(g16.download(), bf16_words(got_dx)) << "dx in bf16";
}

TEST_F(GpuParity, GeluAndResidualElementwise) {
  for (size_t n : {size_t(1), size_t(1000), size_t(1) << 20}) {
    const Floats x = random_floats(n, rng_, -8.0f, 8.0f), dy = random_floats(n, rng_);
    Floats y(n), dx(n), sum(n), acc = random_floats(n, rng_);
    lk::gelu_forward_cpu(x.data(), y.data(), n);
    lk::gelu_backward_cpu(x.data(), dy.data(), dx.data(), n);
    lk::residual_add_cpu(x.data(), dy.data(), sum.data(), n);
    DeviceArray<float> gx(x), gdy(dy), gy(n), gdx(n), gsum(n), gacc(acc);
    lk::residual_accumulate_cpu(dy.data(), acc.data(), n);
    lk::gelu_forward_cuda(gx.get(), gy.get(), n, stream_);
    lk::gelu_backward_cuda(gx.get(), gdy.get(), gdx.get(), n, stream_);
    lk::residual_add_cuda(gx.get(), gdy.get(), gsum.get(), n, stream_);
    lk::residual_accumulate_cuda(gdy.get(), gacc.get(), n, stream_);
    sync();
    EXPECT_TRUE(close(gy.download(), y, 1e-6)) << "gelu y, n=" << n;
    DeviceArray<uint16_t> gy16(n);
    lk::gelu_forward_cuda(gx.get(), nullptr, n, stream_, gy16.get());
    sync();
    EXPECT_EQ(gy16.download(), bf16_words(gy.download())) << "gelu y in bf16, n=" << n;
    EXPECT_TRUE(close(gdx.download(), dx, 1e-6)) << "gelu dx, n=" << n;
    EXPECT_EQ(gsum.download(), sum) << "n=" << n;
    EXPECT_EQ(gacc.download(), acc) << "n=" << n;
  }
}

// Each element's value once widened from its bf16 word.
Floats widened(const std::vector<uint16_t>& words) {
  Floats out(words.size());
  lk::cast_bf16_to_f32_cpu(words.data(), out.data(), words.size());
  return out;
}

// A bf16 product's case: random operands' words (a for op(A), b for op(B) as stored) and, with a
// bias, its words, and z, the fp32 product of their values plus the bias's value on the CPU (the
// oracle of the epilogue products).
struct ProductCase {
  std::vector<uint16_t> a16, b16, bias16;
  Floats z;
  ProductCase(const lk::GemmShape& s, std::mt19937& rng, bool bias)
      : a16(bf16_words(random_floats(size_t(s.m) * s.k, rng))),
        b16(bf16_words(random_floats(size_t(s.k) * s.n, rng))),
        bias16(bf16_words(random_floats(bias ? size_t(s.n) : 0, rng))),
        z(size_t(s.m) * s.n) {
    lk::gemm_cpu(s, widened(a16).data(), widened(b16).data(), z.data());
    const Floats b = widened(bias16);
    for (size_t r = 0; r < size_t(s.m) && bias; ++r)
      for (size_t j = 0; j < size_t(s.n); ++j) z[r * s.n + j] += b[j];
  }
};

// The MLP's first product with the bias and GELU in cuBLASLt's epilogue (LOCKSTEP_CUDA_GELU=
// epilogue): the oracle is the fp32 product of the bf16-rounded operands plus the bf16-rounded bias
// (z) and its GELU on the CPU, each within bf16's rounding; the backward pass from the kept bf16
// pre-activation gives the bits of the fp32 kernel's on those values widened. Refused (false,
// nothing written) where an output does not start on 16 bytes.
TEST_F(GpuParity, GeluEpilogueProductNearTheCpuFunction) {
  const lk::GemmShape shapes[] = {
      {.m = 64, .n = 256, .k = 128}, {.m = 37, .n = 72, .k = 96}, {.m = 2048, .n = 3072, .k = 768}};
  for (const auto& s : shapes) {
    SCOPED_TRACE(testing::Message() << "m=" << s.m << " n=" << s.n << " k=" << s.k);
    const size_t mn = size_t(s.m) * s.n;
    const ProductCase c(s, rng_, true);
    const Floats& z = c.z;
    Floats y(mn);
    lk::gelu_forward_cpu(z.data(), y.data(), mn);
    DeviceArray<uint16_t> da(c.a16), db(c.b16), dbias(c.bias16), dy16(mn), dpre16(mn);
    ASSERT_TRUE(lk::gemm_bf16_bias_gelu_cuda(s, da.get(), db.get(), dbias.get(), dy16.get(),
                                             dpre16.get(), stream_))
        << "cuBLASLt offered no GELU epilogue for the shape";
    sync();
    const Floats pre = widened(dpre16.download());
    EXPECT_TRUE(close(pre, z, 1e-2)) << "the pre-activation";
    EXPECT_TRUE(close(widened(dy16.download()), y, 1e-2)) << "the GELU's output";

    const Floats dg = random_floats(mn, rng_), db0 = random_floats(size_t(s.n), rng_);
    DeviceArray<float> gdg(dg), gpre(pre), gdb(db0), gdb_from16(db0);
    DeviceArray<uint16_t> g16(mn), g16_from16(mn);
    lk::gelu_backward_bf16_column_sums_cuda(gpre.get(), gdg.get(), s.m, s.n, g16.get(), gdb.get(),
                                            stream_);
    lk::gelu_backward_bf16_column_sums_cuda(dpre16.get(), gdg.get(), s.m, s.n, g16_from16.get(),
                                            gdb_from16.get(), stream_);
    sync();
    EXPECT_EQ(g16_from16.download(), g16.download()) << "dy in bf16 from the bf16 pre-activation";
    EXPECT_EQ(gdb_from16.download(), gdb.download()) << "the bias gradient's column sums";

    // The derivative in the epilogue of the product that gives the GELU's output gradient (the
    // MLP's second product's dx: e [m, k] times f^T, f stored [n, k]): GELU'(pre) times the
    // product of the bf16 operands, within bf16's rounding.
    const lk::GemmShape sd{.m = s.m, .n = s.n, .k = s.k, .trans_b = true};
    const ProductCase d(sd, rng_, false);
    Floats want(mn);
    lk::gelu_backward_cpu(pre.data(), d.z.data(), want.data(), mn);
    DeviceArray<uint16_t> de(d.a16), df(d.b16), ddg16(mn);
    ASSERT_TRUE(
        lk::gemm_bf16_dgelu_out_cuda(sd, de.get(), df.get(), dpre16.get(), ddg16.get(), stream_))
        << "cuBLASLt offered no GELU-derivative epilogue for the shape";
    sync();
    const Floats dgw = widened(ddg16.download());
    EXPECT_TRUE(close(dgw, want, 1e-2)) << "GELU'(pre) times the product";

    const std::vector<uint16_t> marked(mn + 8, 0x1234);
    DeviceArray<uint16_t> off(marked);
    EXPECT_FALSE(lk::gemm_bf16_bias_gelu_cuda(s, da.get(), db.get(), dbias.get(), off.get() + 1,
                                              dpre16.get(), stream_))
        << "an output off 16 bytes";
    sync();
    EXPECT_EQ(off.download(), marked) << "nothing written where refused";
  }
}

// Random qkv (in [-2, 2]) and dout for one attention shape, and the CPU twin's results on them:
// the oracle both attention tests compare against.
struct AttentionCase {
  Floats qkv, dout, out, heads, probs, work, dqkv;
  AttentionCase(const lk::AttentionShape& s, std::mt19937& rng)
      : qkv(random_floats(3 * size_t(s.batch) * s.seq * s.channels(), rng, -2.0f, 2.0f)),
        dout(random_floats(qkv.size() / 3, rng)),
        out(dout.size()),
        heads(lk::attention_heads_floats(s)),
        probs(lk::attention_probs_floats(s)),
        work(lk::attention_workspace_floats(s)),
        dqkv(qkv.size()) {
    lk::attention_forward_cpu(s, qkv.data(), out.data(), heads.data(), probs.data(), work.data());
    lk::attention_backward_cpu(s, dout.data(), heads.data(), probs.data(), dqkv.data(),
                               work.data());
  }
};

// The qkv product written in bf16 with its bias in cuBLASLt's epilogue (what cuDNN's attention
// reads in place): the oracle is the fp32 product of the bf16-rounded operands plus the
// bf16-rounded bias, within bf16's rounding. Where cuBLASLt refuses (an output off 16 bytes: false,
// nothing written), dense_forward_bf16_out_cuda computes the same function another way.
TEST_F(GpuParity, BiasEpilogueProductWrittenInBf16) {
  const lk::GemmShape shapes[] = {
      {.m = 64, .n = 384, .k = 128}, {.m = 40, .n = 72, .k = 96}, {.m = 2048, .n = 2304, .k = 768}};
  for (const auto& s : shapes) {
    SCOPED_TRACE(testing::Message() << "m=" << s.m << " n=" << s.n << " k=" << s.k);
    const size_t mn = size_t(s.m) * s.n;
    const ProductCase c(s, rng_, true);
    const Floats& z = c.z;
    DeviceArray<uint16_t> da(c.a16), db(c.b16), dbias16(c.bias16), dy16(mn);
    DeviceArray<float> dbias(widened(c.bias16));
    ASSERT_TRUE(
        lk::gemm_bf16_bias_out_cuda(s, da.get(), db.get(), dbias16.get(), dy16.get(), stream_))
        << "cuBLASLt offered no bias epilogue with a bf16 output for the shape";
    const std::vector<uint16_t> marked(mn + 8, 0x1234);
    DeviceArray<uint16_t> off(marked), fallback(marked);
    EXPECT_FALSE(
        lk::gemm_bf16_bias_out_cuda(s, da.get(), db.get(), dbias16.get(), off.get() + 1, stream_))
        << "an output off 16 bytes";
    lk::dense_forward_bf16_out_cuda({s.m, s.k, s.n}, da.get(), db.get(), dbias16.get(), dbias.get(),
                                    fallback.get() + 1, stream_);
    sync();
    EXPECT_TRUE(close(widened(dy16.download()), z, 1e-2)) << "the product";
    EXPECT_EQ(off.download(), marked) << "nothing written where refused";
    const std::vector<uint16_t> f = fallback.download();
    EXPECT_EQ(f[0], 0x1234) << "nothing written before the output";
    EXPECT_TRUE(close(widened(std::vector<uint16_t>(f.begin() + 1, f.begin() + 1 + mn)), z, 1e-2))
        << "the product, the fallback's way";
  }
}

TEST_F(GpuParity, CausalAttentionForwardAndBackward) {
  const lk::AttentionShape shapes[] = {{1, 1, 1, 1},
                                       {2, 5, 3, 2},
                                       {3, 33, 2, 16},
                                       {4, 128, 6, 64}};  // the last: a GPT-2-small-like head slice
  for (const auto& s : shapes) {
    SCOPED_TRACE(testing::Message()
                 << "B=" << s.batch << " T=" << s.seq << " H=" << s.heads << " Dh=" << s.head_dim);
    const AttentionCase c(s, rng_);
    const size_t packed = c.out.size();
    const Floats &qkv = c.qkv, &dout = c.dout, &out = c.out, &heads = c.heads, &probs = c.probs,
                 &work = c.work, &dqkv = c.dqkv;
    DeviceArray<float> gqkv(qkv), gdout(dout), gout(packed), gheads(heads.size()),
        gprobs(probs.size()), gwork(work.size()), gdqkv(Floats(dqkv.size(), 7.0f));  // overwritten
    lk::attention_forward_cuda(s, gqkv.get(), gout.get(), gheads.get(), gprobs.get(), gwork.get(),
                               stream_);
    lk::attention_backward_cuda(s, gdout.get(), gheads.get(), gprobs.get(), gdqkv.get(),
                                gwork.get(), stream_);
    sync();
    EXPECT_EQ(gheads.download(), heads) << "the head rearrangement is a copy";
    const Floats got_probs = gprobs.download();
    EXPECT_TRUE(close(got_probs, probs, 1e-5)) << "probs";
    size_t above = 0;
    for (size_t r = 0; r < got_probs.size() / s.seq; ++r)
      for (int u = static_cast<int>(r % s.seq) + 1; u < s.seq; ++u)
        above += got_probs[r * s.seq + u] != 0.0f;
    EXPECT_EQ(above, 0u) << "probabilities above the diagonal must be exactly 0";
    EXPECT_TRUE(close(gout.download(), out, 1e-4)) << "out";
    EXPECT_TRUE(close(gdqkv.download(), dqkv, 1e-4)) << "dqkv";
  }
}

// A bf16 attention path (the flash kernels, cuDNN's fused attention): its buffers' sizes and its
// two passes, run on device buffers.
struct Bf16Attention {
  size_t (*heads_floats)(const lk::AttentionShape&);
  size_t (*lse_floats)(const lk::AttentionShape&);
  size_t (*workspace_floats)(const lk::AttentionShape&);
  void (*forward)(const lk::AttentionShape&, const float* qkv, float* out, uint16_t* heads,
                  float* lse, cudaStream_t);
  void (*backward)(const lk::AttentionShape&, const uint16_t* heads, const float* out,
                   const float* lse, const float* dout, float* dqkv, float* workspace,
                   cudaStream_t);
  // Whether the path takes s (null: every shape here); a shape it refuses is skipped, saying why
  // (the layer then runs the flash kernels).
  bool (*takes)(const lk::AttentionShape&, std::string* why) = nullptr;
};

// A bf16 path against the exact fp32 function of the CPU twin: bf16 operands give about 3
// significant digits, so the output and the gradients are judged at 2e-2 and 3e-2 of their scale.
// Sequences that are not a multiple of the 64-row tile, every head width the flash kernels take,
// the 1024-token rows of GPT-2 small; out and dqkv start as garbage (every element is overwritten)
// and a second backward pass gives the same bits (no atomics).
void expect_near_exact_and_deterministic(const Bf16Attention& path, std::mt19937& rng,
                                         cudaStream_t stream) {
  const lk::AttentionShape shapes[] = {
      {1, 1, 1, 16}, {2, 70, 3, 32}, {2, 200, 2, 64}, {1, 130, 2, 128}, {1, 1024, 2, 64}};
  for (const auto& s : shapes) {
    SCOPED_TRACE(testing::Message()
                 << "B=" << s.batch << " T=" << s.seq << " H=" << s.heads << " Dh=" << s.head_dim);
    std::string why;
    if (path.takes != nullptr && !path.takes(s, &why)) {
      std::cout << "[   NOTE   ] shape refused, skipped: " << why << "\n";
      continue;
    }
    const AttentionCase c(s, rng);
    const size_t packed = c.out.size();
    const Floats &qkv = c.qkv, &dout = c.dout, &out = c.out, &dqkv = c.dqkv;
    DeviceArray<float> gqkv(qkv), gdout(dout), gout(Floats(packed, 5.0f)),
        gheads(path.heads_floats(s)), glse(path.lse_floats(s)), gwork(path.workspace_floats(s)),
        gdqkv(Floats(dqkv.size(), 7.0f));
    uint16_t* heads16 = reinterpret_cast<uint16_t*>(gheads.get());
    auto backward = [&] {
      path.backward(s, heads16, gout.get(), glse.get(), gdout.get(), gdqkv.get(), gwork.get(),
                    stream);
      lk::cuda_stream_synchronize(stream);
    };
    path.forward(s, gqkv.get(), gout.get(), heads16, glse.get(), stream);
    backward();
    EXPECT_TRUE(close(gout.download(), out, 2e-2)) << "out";
    const Floats first = gdqkv.download();
    EXPECT_TRUE(close(first, dqkv, 3e-2)) << "dqkv";
    backward();
    EXPECT_EQ(gdqkv.download(), first) << "a second backward pass must give the same bits";
  }
}

// One forward and backward pass of a path's fp32 calls on (qkv, dout): out, dqkv and the
// statistics, downloaded.
struct AttentionRun {
  Floats out, dqkv, lse;
};
AttentionRun run_fp32_calls(const Bf16Attention& path, const lk::AttentionShape& s,
                            const Floats& qkv, const Floats& dout, cudaStream_t stream) {
  DeviceArray<float> gqkv(qkv), gdout(dout), out(dout.size()), dqkv(qkv.size()),
      heads(path.heads_floats(s)), lse(path.lse_floats(s)), ws(path.workspace_floats(s));
  auto* heads16 = reinterpret_cast<uint16_t*>(heads.get());
  path.forward(s, gqkv.get(), out.get(), heads16, lse.get(), stream);
  path.backward(s, heads16, out.get(), lse.get(), gdout.get(), dqkv.get(), ws.get(), stream);
  lk::cuda_stream_synchronize(stream);
  return {out.download(), dqkv.download(), lse.download()};
}

// cuDNN's fp32 calls (the heads buffer), as Bf16Attention.
Bf16Attention cudnn_fp32_calls() {
  return {lk::attention_cudnn_heads_floats,
          lk::attention_cudnn_lse_floats,
          lk::attention_cudnn_workspace_floats,
          lk::attention_cudnn_forward_cuda,
          [](const lk::AttentionShape& s, const uint16_t* heads, const float*, const float* lse,
             const float* dout, float* dqkv, float* workspace, cudaStream_t stream) {
            lk::attention_cudnn_backward_cuda(s, heads, lse, dout, dqkv, workspace, stream);
          },
          [](const lk::AttentionShape& s, std::string* why) {
            return lk::attention_cudnn_usable(s, why);
          }};
}

TEST_F(GpuParity, FlashAttentionNearTheExactFunctionAndDeterministic) {
  expect_near_exact_and_deterministic(
      {lk::attention_flash_heads_floats, lk::attention_flash_lse_floats,
       lk::attention_flash_workspace_floats, lk::attention_flash_forward_cuda,
       lk::attention_flash_backward_cuda},
      rng_, stream_);
  EXPECT_THROW(
      lk::attention_flash_forward_cuda({1, 4, 1, 8}, nullptr, nullptr, nullptr, nullptr, stream_),
      std::invalid_argument);
}

// cuDNN's fused attention (LOCKSTEP_CUDA_ATTENTION=cudnn) to the same standard, its backward pass
// on cuDNN's deterministic algorithm. Skips, saying why, where the build has no cuDNN frontend or
// this device's cuDNN refuses the graphs.
TEST_F(GpuParity, CudnnAttentionNearTheExactFunctionAndDeterministic) {
  if (!lk::attention_cudnn_built()) GTEST_SKIP() << "this build has no cuDNN attention";
  std::string why;
  if (!lk::attention_cudnn_usable({2, 70, 3, 32}, &why))
    GTEST_SKIP() << "cuDNN refused the attention graphs: " << why;
  expect_near_exact_and_deterministic(cudnn_fp32_calls(), rng_, stream_);

  // The bf16 calls (the GPT block's edges) are what these fp32 calls wrap (the words widened, the
  // gradient cast), so the standard above is theirs too.
  EXPECT_THROW(
      lk::attention_cudnn_forward_cuda({1, 4, 1, 12}, nullptr, nullptr, nullptr, nullptr, stream_),
      std::invalid_argument);
}

// The GPT block's cuDNN calls: Q, K and V read in place from the qkv product's words, dO taken
// in bf16 (attention_cudnn_forward_packed_cuda / _backward_packed_cuda). To the same standard as
// the calls above, through the same fp32 edges (the words cast here), and given the same words the
// same function as the calls that copy Q, K and V by heads first (within bf16's rounding; whether
// cuDNN gave the same bits for the two layouts is said).
TEST_F(GpuParity, CudnnAttentionReadingTheQkvProductInPlace) {
  if (!lk::attention_cudnn_built()) GTEST_SKIP() << "this build has no cuDNN attention";
  std::string why;
  if (!lk::attention_cudnn_usable({2, 70, 3, 32}, &why, true))
    GTEST_SKIP() << "cuDNN refused the attention graphs: " << why;
  // heads: the qkv words (3 n) then the output's (n); workspace: dO's words (n) then dQKV's (3 n).
  auto forward = [](const lk::AttentionShape& s, const float* qkv, float* out, uint16_t* heads,
                    float* lse, cudaStream_t stream) {
    const size_t n = size_t(s.batch) * s.seq * s.channels();
    lk::cast_f32_to_bf16_cuda(qkv, heads, 3 * n, stream);
    lk::attention_cudnn_forward_packed_cuda(s, heads, heads + 3 * n, lse, stream);
    lk::cast_bf16_to_f32_cuda(heads + 3 * n, out, n, stream);
  };
  auto backward = [](const lk::AttentionShape& s, const uint16_t* heads, const float*,
                     const float* lse, const float* dout, float* dqkv, float* workspace,
                     cudaStream_t stream) {
    const size_t n = size_t(s.batch) * s.seq * s.channels();
    auto* d_o = reinterpret_cast<uint16_t*>(workspace);
    lk::cast_f32_to_bf16_cuda(dout, d_o, n, stream);
    lk::attention_cudnn_backward_packed_cuda(s, heads, heads + 3 * n, lse, d_o, d_o + n, stream);
    lk::cast_bf16_to_f32_cuda(d_o + n, dqkv, 3 * n, stream);
  };
  const Bf16Attention packed{lk::attention_cudnn_heads_floats,
                             lk::attention_cudnn_lse_floats,
                             lk::attention_cudnn_workspace_floats,
                             forward,
                             backward,
                             [](const lk::AttentionShape& s, std::string* why) {
                               return lk::attention_cudnn_usable(s, why, true);
                             }};
  expect_near_exact_and_deterministic(packed, rng_, stream_);

  // Against the calls that copy by heads, on the same inputs.
  const lk::AttentionShape s{2, 200, 2, 64};
  if (!lk::attention_cudnn_usable(s, &why) || !lk::attention_cudnn_usable(s, &why, true))
    GTEST_SKIP() << "the layouts not compared: cuDNN refused the graphs of 2 x 200 x 2 x 64: "
                 << why;
  const size_t n = size_t(s.batch) * s.seq * s.channels();
  const Floats qkv = random_floats(3 * n, rng_), dout = random_floats(n, rng_);
  const AttentionRun by_heads = run_fp32_calls(cudnn_fp32_calls(), s, qkv, dout, stream_);
  const AttentionRun in_place = run_fp32_calls(packed, s, qkv, dout, stream_);
  EXPECT_TRUE(close(in_place.out, by_heads.out, 1e-2)) << "out";
  EXPECT_TRUE(close(in_place.lse, by_heads.lse, 1e-5)) << "the statistics";
  EXPECT_TRUE(close(in_place.dqkv, by_heads.dqkv, 2e-2)) << "dqkv";
  std::cout << "[   NOTE   ] the two layouts gave "
            << (in_place.out == by_heads.out && in_place.dqkv == by_heads.dqkv ? "the same"
                                                                               : "other")
            << " bits\n";
}

}  // namespace
