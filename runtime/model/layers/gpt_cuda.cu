// The CUDA twins of the GPT layers (gpt.cpp): gpt_layers.h over the kernels' CUDA launchers, on the
// model's stream and in device memory. With Precision::bf16 a block's four dense products run as
// bf16 GEMMs with fp32 accumulation (their weights' words the model's bf16 copy of its parameters
// where it keeps one, else cast at every forward, as cuda_layer.h explains; each input's bf16 copy
// kept for its backward pass) and attention runs flash-style on bf16 tensor-core tiles
// (attention_flash.h) where the head width allows (or, asked for with
// LOCKSTEP_CUDA_ATTENTION=cudnn, through cuDNN's fused attention: attention_cudnn.h, which reads Q,
// K and V in place from the qkv product's bf16 words, its bias added in the product's epilogue,
// and dO as the projection's backward product writes it in bf16, and whose bf16 output is the
// projection's input and bf16 dQKV the qkv product's dy, as they are), and the tied head's two
// products are bf16 GEMMs too. The layer norms and GELU before a product write its bf16 input
// directly (no fp32 copy, no cast pass); biases and residual additions ride in the GEMMs'
// epilogues, the GELU's backward in the bias gradient's pass; with LOCKSTEP_CUDA_GELU=epilogue the
// GELU itself rides in the MLP's first product (cuBLASLt's GELU epilogue, its bias in bf16), the
// pre-activation its backward reads is kept in bf16, and its derivative rides in the second
// product's backward pass (cuBLASLt's DGELU epilogue, writing the first product's bf16 dy); the
// other activations, the embedding and the statistics stay fp32. Plain C++ over the launchers: a
// .cu only so that it is built with CUDA and gpt_cuda_stub.cpp without.
#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <mutex>
#include <string>
#include <utility>

#include "kernels/cast.h"
#include "kernels/gemm.h"
#include "kernels/gpt/attention_cudnn.h"
#include "kernels/gpt/attention_flash.h"
#include "kernels/gpt/gelu.h"
#include "kernels/gpt/residual.h"
#include "runtime/base/error.h"
#include "runtime/model/layers/cuda_layer.h"
#include "runtime/model/layers/gpt.h"
#include "runtime/model/layers/gpt_layers.h"

namespace lockstep {
namespace {

// cuda_gelu_epilogue_refusals (gpt.h): counted at each product that fell back.
std::atomic<long> gelu_epilogue_refusals{0};

class CudaGptOps {
 public:
  // heads: the block's attention (its seq, heads and head_dim; batch unused; zeros for the layers
  // without attention); recompute_gelu: the block recomputes its GELU from the pre-activation
  // (--recompute gelu), which the GELU epilogue's bf16 pre-activation would not give back bit for
  // bit, so it keeps the kernel.
  explicit CudaGptOps(const CudaLayerPlacement& where, const kernels::AttentionShape& heads = {},
                      bool recompute_gelu = false)
      : stream_(where.stream),
        bf16_(where.precision == Precision::bf16),
        shared_(bf16_ ? where.bf16_params : nullptr),
        // LOCKSTEP_CUDA_ATTENTION (knobs.h): flash, the default in bf16 runs; cudnn, cuDNN's
        // fused attention (attention_cudnn.h) where this build has it and cuDNN takes the shape,
        // else the flash kernels (said once); or materialised (attention.h's exact path in both
        // precisions, for comparison).
        flash_(bf16_ && where.knobs.cuda_attention != AttentionKnob::materialised &&
               kernels::attention_flash_supported({.head_dim = heads.head_dim})),
        cudnn_(flash_ && where.knobs.cuda_attention == AttentionKnob::cudnn),
        // LOCKSTEP_CUDA_GELU (knobs.h): kernel, the default, or epilogue (dense_gelu_to_dense).
        gelu_epilogue_(bf16_ && where.knobs.cuda_gelu == GeluKnob::epilogue && !recompute_gelu),
        heads_(heads) {}

  DeviceKind device() const { return DeviceKind::cuda; }
  // bf16 runs: the layer norms and GELU before a product write its bf16 input only.
  bool keeps_fp32_dense_inputs() const { return !bf16_; }
  void reserve_dense(int slot, size_t rows, int in, int out) {
    if (!bf16_) return;
    const size_t i = static_cast<size_t>(slot);
    x16_[i] = Buffer<uint16_t>(DeviceKind::cuda, rows * static_cast<size_t>(in));
    w16_[i] = Bf16Weights(static_cast<size_t>(in) * out, shared_);
    // The biases that ride in bf16 epilogues: the GELU's, and the qkv product's for cuDNN.
    if ((gelu_epilogue_ && slot == kFc) || (cudnn_ && slot == kQkv))
      b16_[i] = Bf16Weights(static_cast<size_t>(out), shared_);
  }
  // dy in bf16 (2 per float).
  size_t dense_scratch_floats(size_t rows, int out) const {
    return bf16_ ? (rows * static_cast<size_t>(out) + 1) / 2 : 0;
  }

  void tokens(const float* x, int32_t* t, size_t n, int vocab) {
    kernels::tokens_from_floats_cuda(x, t, n, vocab, stream_);
  }
  void embedding_forward(const kernels::EmbeddingShape& s, const int32_t* t, const float* wte,
                         const float* wpe, float* out) {
    kernels::embedding_forward_cuda(s, t, wte, wpe, out, stream_);
  }
  void embedding_backward(const kernels::EmbeddingShape& s, const int32_t* t, const float* dout,
                          float* dwte, float* dwpe) {
    kernels::embedding_backward_cuda(s, t, dout, dwte, dwpe, stream_);
  }
  void layernorm_forward(const kernels::LayerNormShape& s, const float* x, const float* gamma,
                         const float* beta, float* y, float* mean, float* rstd) {
    kernels::layernorm_forward_cuda(s, x, gamma, beta, y, mean, rstd, stream_);
  }
  void layernorm_backward(const kernels::LayerNormShape& s, const float* x, const float* gamma,
                          const float* mean, const float* rstd, const float* dy, float* dx,
                          float* dgamma, float* dbeta, const float* dx_add = nullptr) {
    kernels::layernorm_backward_cuda(s, x, gamma, mean, rstd, dy, dx, dgamma, dbeta, stream_,
                                     dx_add);
  }
  // bf16 runs take the flash kernels where the head width allows (attention_flash.h): Q, K and V
  // kept in bf16 for backward with one log-sum-exp per row; fp32 runs keep the exact materialised
  // path (attention.h). With cuDNN's attention the qkv product writes its bf16 words into the kept
  // buffer itself, where cuDNN reads Q, K and V in place, forward and backward (no rounding pass,
  // no copy by heads, no fp32 qkv).
  bool attention_keeps_qkv(const kernels::AttentionShape& s) const { return cudnn_for(s); }
  // With cudnn the buffers fit both paths, so that a shape cuDNN refuses takes the flash kernels.
  size_t attention_heads_floats(const kernels::AttentionShape& s) const {
    if (!flash_) return kernels::attention_heads_floats(s);
    cudnn_for(s);  // builds cuDNN's graphs for the shape now, outside any capture
    return std::max(kernels::attention_flash_heads_floats(s),
                    cudnn_ ? kernels::attention_cudnn_heads_floats(s) : 0);
  }
  size_t attention_probs_floats(const kernels::AttentionShape& s) const {
    if (!flash_) return kernels::attention_probs_floats(s);
    return std::max(kernels::attention_flash_lse_floats(s),
                    cudnn_ ? kernels::attention_cudnn_lse_floats(s) : 0);
  }
  size_t attention_workspace_floats(const kernels::AttentionShape& s) const {
    if (!flash_) return kernels::attention_workspace_floats(s);
    return std::max(kernels::attention_flash_workspace_floats(s),
                    cudnn_ ? kernels::attention_cudnn_workspace_floats(s) : 0);
  }
  // cuDNN's output is written in bf16 as the projection's input (staged: no fp32 out, no cast),
  // where its backward pass reads it again as cuDNN's O; qkv holds the product's words (it is
  // `heads`: attention_keeps_qkv).
  void attention_forward(const kernels::AttentionShape& s, const float* qkv, float* out,
                         float* heads, float* probs, float* ws) {
    if (cudnn_for(s))
      kernels::attention_cudnn_forward_packed_cuda(s, reinterpret_cast<const uint16_t*>(qkv),
                                                   stage(kProj), probs, stream_);
    else if (flash_)
      kernels::attention_flash_forward_cuda(s, qkv, out, reinterpret_cast<uint16_t*>(heads), probs,
                                            stream_);
    else
      kernels::attention_forward_cuda(s, qkv, out, heads, probs, ws, stream_);
  }
  // cuDNN's dQ, dK and dV stay bf16 words in dqkv's buffer, which the qkv product's backward pass
  // (dense_backward of slot kQkv, next) reads as its dy: no widening, no cast back. dout holds dO's
  // words, as the projection's backward product wrote them (dense_backward of slot kProj, before).
  void attention_backward(const kernels::AttentionShape& s, const float* out, const float* dout,
                          const float* heads, const float* probs, float* dqkv, float* ws) {
    if (cudnn_for(s)) {
      auto* dqkv16 = reinterpret_cast<uint16_t*>(dqkv);
      if (std::exchange(dout16_, nullptr) != reinterpret_cast<const uint16_t*>(dout))
        throw Error("gpt: the attention's output gradient is not where the projection wrote it");
      kernels::attention_cudnn_backward_packed_cuda(
          s, reinterpret_cast<const uint16_t*>(heads), x16_[kProj].data(), probs,
          reinterpret_cast<const uint16_t*>(dout), dqkv16, stream_);
      dqkv16_ = dqkv16;
    } else if (flash_)
      kernels::attention_flash_backward_cuda(s, reinterpret_cast<const uint16_t*>(heads), out,
                                             probs, dout, dqkv, ws, stream_);
    else
      kernels::attention_backward_cuda(s, dout, heads, probs, dqkv, ws, stream_);
  }
  void layernorm_to_dense(int slot, const kernels::LayerNormShape& s, const float* x,
                          const float* gamma, const float* beta, float* y, float* mean,
                          float* rstd) {
    kernels::layernorm_forward_cuda(s, x, gamma, beta, bf16_ ? nullptr : y, mean, rstd, stream_,
                                    stage(slot));
  }
  void gelu_to_dense(int slot, const float* x, float* y, size_t n) {
    kernels::gelu_forward_cuda(x, bf16_ ? nullptr : y, n, stream_, stage(slot));
  }
  // The tied head: in bf16 runs the layer-normed rows are cast once per forward and kept for
  // backward, wte's words taken from the model's copy (or cast likewise), dlogits cast into the
  // scratch (the GEMMs as dense's, without a bias).
  void reserve_head(size_t rows, int d, int v) {
    if (!bf16_) return;
    head_w16_ = Bf16Weights(static_cast<size_t>(v) * d, shared_);
    head_x16_ = Buffer<uint16_t>(DeviceKind::cuda, rows * static_cast<size_t>(d));
  }
  size_t head_scratch_floats(size_t rows, int v) const { return dense_scratch_floats(rows, v); }
  // bf16 runs may write the logits in bf16 and take their gradient so (Model::forward's bf16_ok:
  // the trainer's steps, with LOCKSTEP_CUDA_LOGITS=bf16): half the bytes written and read for the
  // largest activation at GPT-2's 50,304 tokens, and no cast of dlogits.
  bool head_bf16_logits() const { return bf16_; }
  // logits16: y holds bf16 words (the product's fp32 sums rounded by cuBLAS), not floats.
  void head_forward(const kernels::DenseShape& s, const float* x, const float* w, float* y,
                    bool logits16) {
    const kernels::GemmShape g{.m = s.batch, .n = s.out, .k = s.in, .trans_b = true};
    if (!bf16_) {
      kernels::gemm_cuda(g, x, w, y, stream_);
      return;
    }
    const uint16_t* w16 = head_w16_.refresh(w, stream_);
    kernels::cast_f32_to_bf16_cuda(x, head_x16_.data(), static_cast<size_t>(s.batch) * s.in,
                                   stream_);
    if (logits16)
      kernels::gemm_bf16_out_cuda(g, head_x16_.data(), w16, reinterpret_cast<uint16_t*>(y),
                                  stream_);
    else
      kernels::gemm_bf16_cuda(g, head_x16_.data(), w16, y, stream_);
  }
  // logits16: dy holds bf16 words, the GEMMs' operand as it is.
  void head_backward(const kernels::DenseShape& s, const float* x, const float* w, const float* dy,
                     bool logits16, float* dx, float* dw, float* scratch) {
    const kernels::GemmShape gx{.m = s.batch, .n = s.in, .k = s.out};
    const kernels::GemmShape gw{.m = s.out, .n = s.in, .k = s.batch, .trans_a = true, .beta = 1.0f};
    if (!bf16_) {
      kernels::gemm_cuda(gx, dy, w, dx, stream_);
      kernels::gemm_cuda(gw, dy, x, dw, stream_);
      return;
    }
    const uint16_t* dy16 = reinterpret_cast<const uint16_t*>(dy);
    if (!logits16) {
      auto* cast = reinterpret_cast<uint16_t*>(scratch);
      kernels::cast_f32_to_bf16_cuda(dy, cast, static_cast<size_t>(s.batch) * s.out, stream_);
      dy16 = cast;
    }
    kernels::gemm_bf16_cuda(gx, dy16, head_w16_.get(), dx, stream_);
    kernels::gemm_bf16_cuda(gw, dy16, head_x16_.data(), dw, stream_);
  }
  void dense_forward(int slot, const kernels::DenseShape& s, const float* x, const float* w,
                     const float* b, float* y, const float* residual = nullptr) {
    if (!bf16_) {
      kernels::dense_forward_cuda(s, x, w, b, y, stream_);
      if (residual != nullptr)
        kernels::residual_add_cuda(residual, y, y, static_cast<size_t>(s.batch) * s.out, stream_);
      return;
    }
    const size_t i = static_cast<size_t>(slot);
    const uint16_t* w16 = w16_[i].refresh(w, stream_);
    if (slot == kQkv && cudnn_for(attention_of(s.batch))) {  // y is `heads`: the words cuDNN reads
      kernels::dense_forward_bf16_out_cuda(s, input16(slot, x, s), w16, b16_[i].refresh(b, stream_),
                                           b, reinterpret_cast<uint16_t*>(y), stream_);
      return;
    }
    // An input staged in bf16 by layernorm_to_dense / gelu_to_dense is not cast again; the bias and
    // the residual go in the GEMM's epilogue.
    kernels::dense_forward_bf16_cuda(s, std::exchange(staged_[i], false) ? nullptr : x, w16, b, y,
                                     x16_[i].data(), stream_, residual);
  }
  void dense_backward(int slot, const kernels::DenseShape& s, const float* x, const float* w,
                      const float* dy, float* dx, float* dw, float* db, float* scratch) {
    if (!bf16_) {
      kernels::dense_backward_cuda(s, x, w, dy, dx, dw, db, stream_);
      return;
    }
    const size_t i = static_cast<size_t>(slot);
    if (slot == kQkv && dqkv16_ != nullptr) {  // dy holds cuDNN's bf16 words (attention_backward)
      uint16_t* dy16 = std::exchange(dqkv16_, nullptr);
      if (reinterpret_cast<const void*>(dy) != dy16)
        throw Error("gpt: the qkv product's gradient is not where the attention wrote it");
      kernels::dense_backward_bf16_cuda(s, x16_[i].data(), w16_[i].get(), nullptr, dx, dw, db, dy16,
                                        stream_);
      return;
    }
    if (slot == kMlpOut && pre16_ != nullptr) {
      // dy's cast and the bias and weight gradients as always; dx, the GELU's output gradient,
      // with the GELU's derivative in the product's epilogue, at the bf16 pre-activation the
      // forward pass kept: the fc product's bf16 dy as it reads it (gelu_dense_backward, next).
      auto* dy16 = reinterpret_cast<uint16_t*>(scratch);
      kernels::dense_backward_bf16_cuda(s, x16_[i].data(), w16_[i].get(), dy, nullptr, dw, db, dy16,
                                        stream_);
      const kernels::GemmShape gx{.m = s.batch, .n = s.in, .k = s.out, .trans_b = true};
      auto* dg16 = reinterpret_cast<uint16_t*>(dx);
      if (kernels::gemm_bf16_dgelu_out_cuda(gx, dy16, w16_[i].get(), pre16_, dg16, stream_)) {
        dg16_ = dg16;
        return;
      }
      gelu_epilogue_refusals.fetch_add(1, std::memory_order_relaxed);
      static std::once_flag said;
      std::call_once(said, [&] {
        std::fprintf(stderr,
                     "lockstep: LOCKSTEP_CUDA_GELU=epilogue: cuBLASLt's GELU-derivative epilogue "
                     "does not take the MLP's backward product (%d x %d x %d); the GELU's backward "
                     "pass runs after it instead\n",
                     gx.m, gx.n, gx.k);
      });
      kernels::gemm_bf16_cuda(gx, dy16, w16_[i].get(), dx, stream_);
      return;
    }
    if (slot == kProj && cudnn_for(attention_of(s.batch))) {  // dO's words, as cuDNN reads them
      dout16_ = reinterpret_cast<uint16_t*>(dx);
      kernels::dense_backward_bf16_cuda(s, x16_[i].data(), w16_[i].get(), dy, nullptr, dw, db,
                                        reinterpret_cast<uint16_t*>(scratch), stream_, dout16_);
      return;
    }
    kernels::dense_backward_bf16_cuda(s, x16_[i].data(), w16_[i].get(), dy, dx, dw, db,
                                      reinterpret_cast<uint16_t*>(scratch), stream_);
  }
  // The MLP's first product and its GELU. With the epilogue (bf16 runs, LOCKSTEP_CUDA_GELU=
  // epilogue): one cuBLASLt product writes the GELU's bf16 output as dense next's input and keeps
  // the bf16 pre-activation in h (half of it used); where cuBLASLt has no such epilogue for the
  // shape, the product into scratch and a GELU pass write the same two (with the bias in fp32).
  void dense_gelu_to_dense(int slot, int next, const kernels::DenseShape& s, const float* x,
                           const float* w, const float* b, float* h, float* g, float* scratch) {
    const size_t n = static_cast<size_t>(s.batch) * s.out;
    if (!keeps_pre16(slot, b != nullptr)) {
      dense_forward(slot, s, x, w, b, h);
      gelu_to_dense(next, h, g, n);
      return;
    }
    const size_t i = static_cast<size_t>(slot);
    const uint16_t* w16 = w16_[i].refresh(w, stream_);
    const uint16_t* b16 = b16_[i].refresh(b, stream_);
    const uint16_t* x16 = input16(slot, x, s);
    uint16_t* y16 = stage(next);
    auto* pre16 = pre16_ = reinterpret_cast<uint16_t*>(h);
    if (kernels::gemm_bf16_bias_gelu_cuda({.m = s.batch, .n = s.out, .k = s.in}, x16, w16, b16, y16,
                                          pre16, stream_))
      return;
    gelu_epilogue_refusals.fetch_add(1, std::memory_order_relaxed);
    static std::once_flag said;
    std::call_once(said, [&] {
      std::fprintf(
          stderr,
          "lockstep: LOCKSTEP_CUDA_GELU=epilogue: cuBLASLt's GELU epilogue does not take the "
          "MLP's product (%d x %d x %d: no algorithm, or a buffer off 16 bytes); a GELU pass runs "
          "after it instead\n",
          s.batch, s.out, s.in);
    });
    kernels::dense_forward_bf16_cuda(s, nullptr, w16, b, scratch, x16_[i].data(), stream_);
    kernels::gelu_forward_cuda(scratch, nullptr, n, stream_, y16, pre16);
  }
  // bf16 runs with a bias: the GELU's backward values go straight to the product's bf16 dy and the
  // bias gradient's column sums, never stored in fp32 (from the bf16 pre-activation that
  // dense_gelu_to_dense kept, with the epilogue). Where the MLP's second product computed them
  // already (dense_backward of slot kMlpOut, the epilogue's other half), dg holds their words.
  void gelu_dense_backward(int slot, const float* h, float* dg, const kernels::DenseShape& s,
                           const float* x, const float* w, float* dx, float* dw, float* db,
                           float* scratch) {
    const size_t rows = static_cast<size_t>(s.batch);
    const size_t i = static_cast<size_t>(slot);
    if (dg16_ != nullptr) {
      uint16_t* dy16 = std::exchange(dg16_, nullptr);
      if (reinterpret_cast<void*>(dg) != dy16)
        throw Error("gpt: the GELU's gradient is not where the MLP's second product wrote it");
      kernels::dense_backward_bf16_cuda(s, x16_[i].data(), w16_[i].get(), nullptr, dx, dw, db, dy16,
                                        stream_);
      return;
    }
    const bool pre16 = keeps_pre16(slot, db != nullptr);
    if (!pre16 && (!bf16_ || db == nullptr)) {
      kernels::gelu_backward_cuda(h, dg, dg, rows * s.out, stream_);
      dense_backward(slot, s, x, w, dg, dx, dw, db, scratch);
      return;
    }
    auto* dy16 = reinterpret_cast<uint16_t*>(scratch);
    if (pre16)
      kernels::gelu_backward_bf16_column_sums_cuda(reinterpret_cast<const uint16_t*>(h), dg, rows,
                                                   s.out, dy16, db, stream_);
    else
      kernels::gelu_backward_bf16_column_sums_cuda(h, dg, rows, s.out, dy16, db, stream_);
    kernels::dense_backward_bf16_cuda(s, x16_[i].data(), w16_[i].get(), nullptr, dx, dw, nullptr,
                                      dy16, stream_);
  }

 private:
  // Whether dense slot's GELU rides in its product's epilogue, so that the pre-activation the block
  // keeps is in bf16: the forward and backward passes ask alike. The epilogue needs the product's
  // bias (a GPT block's fc has one).
  bool keeps_pre16(int slot, bool has_bias) const {
    if (!gelu_epilogue_ || slot != kFc) return false;
    if (!has_bias) throw Error("gpt: the GELU epilogue's product has no bias");
    return true;
  }
  // Dense slot's input in bf16: as staged by the kernel that produced it, else x cast now.
  const uint16_t* input16(int slot, const float* x, const kernels::DenseShape& s) {
    const size_t i = static_cast<size_t>(slot);
    if (!std::exchange(staged_[i], false))
      kernels::cast_f32_to_bf16_cuda(x, x16_[i].data(), static_cast<size_t>(s.batch) * s.in,
                                     stream_);
    return x16_[i].data();
  }
  // The block's attention shape for a dense product over `rows` rows (rows / seq sequences).
  kernels::AttentionShape attention_of(int rows) const {
    kernels::AttentionShape s = heads_;
    s.batch = heads_.seq > 0 ? rows / heads_.seq : 0;
    return s;
  }
  // Where a bf16 run's kernel writes dense slot's input (null in fp32 runs).
  uint16_t* stage(int slot) {
    if (!bf16_) return nullptr;
    staged_[static_cast<size_t>(slot)] = true;
    return x16_[static_cast<size_t>(slot)].data();
  }

  // Whether shape s takes cuDNN's attention (reading Q, K and V from the qkv product's words):
  // asked for, and cuDNN took the shape (its graphs are built at the first question, from the
  // buffers' sizing, before any capture). A refusal is said once per process and the flash kernels
  // run. Asked alike by the qkv and projection products and the attention, forward and backward.
  bool cudnn_for(const kernels::AttentionShape& s) const {
    if (!cudnn_ || s.batch == 0) return false;
    std::string why;
    if (kernels::attention_cudnn_usable(s, &why, true)) return true;
    static std::once_flag said;
    std::call_once(said, [&] {
      std::fprintf(stderr,
                   "lockstep: LOCKSTEP_CUDA_ATTENTION=cudnn: cuDNN's attention is not usable (%s); "
                   "the flash kernels run instead\n",
                   why.c_str());
    });
    return false;
  }

  // The block's dense slots: the qkv product, the attention's projection, the product the GELU
  // follows and the one after the GELU.
  static constexpr int kQkv = 0, kProj = 1, kFc = 2, kMlpOut = 3;

  cudaStream_t stream_;
  bool bf16_;
  const Bf16Params* shared_;  // the model's bf16 copy of its parameters, if it keeps one
  bool flash_, cudnn_, gelu_epilogue_;
  kernels::AttentionShape heads_;  // the block's attention, batch 0
  // Per dense slot of a block (bf16 only): its weights' words (cuda_layer.h), its input's.
  std::array<Bf16Weights, 4> w16_;
  std::array<Buffer<uint16_t>, 4> x16_;
  Bf16Weights head_w16_;            // the tied head's wte (bf16 only)
  Buffer<uint16_t> head_x16_;       // the tied head's input (bf16 only)
  std::array<Bf16Weights, 4> b16_;  // the fc bias (GELU epilogue), the qkv bias (cuDNN)
  std::array<bool, 4> staged_{};    // x16_[slot] holds the next input already
  uint16_t* dqkv16_ = nullptr;      // cuDNN's dQKV words, for the qkv product's backward pass
  uint16_t* dout16_ = nullptr;      // dO's words for cuDNN, from the projection's backward pass
  uint16_t* pre16_ = nullptr;       // the GELU epilogue's kept pre-activation (its last forward)
  uint16_t* dg16_ = nullptr;        // the fc product's dy words, from the MLP's second product
};

}  // namespace

std::unique_ptr<Layer> make_embed_cuda(const LayerPlan& plan, const CudaLayerPlacement& where) {
  return std::make_unique<EmbedLayer<CudaGptOps>>(plan, CudaGptOps(where));
}
std::unique_ptr<Layer> make_block_cuda(const LayerPlan& plan, const CudaLayerPlacement& where) {
  const int heads = plan.spec.args[0];
  return std::make_unique<BlockLayer<CudaGptOps>>(
      plan,
      CudaGptOps(where,
                 {.batch = 0, .seq = plan.in[0], .heads = heads, .head_dim = plan.in[1] / heads},
                 plan.recompute == Recompute::gelu));
}
long cuda_gelu_epilogue_refusals() {
  return gelu_epilogue_refusals.load(std::memory_order_relaxed);
}

std::unique_ptr<Layer> make_lmhead_cuda(const LayerPlan& plan, const CudaLayerPlacement& where) {
  return std::make_unique<LmHeadLayer<CudaGptOps>>(plan, CudaGptOps(where));
}

}  // namespace lockstep
