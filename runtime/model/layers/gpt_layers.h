// The three layer types of a GPT-style language model (gpt.h), written once over a kernel set so
// that the CPU layers and their CUDA twins are the same code: EmbedLayer<Ops>, BlockLayer<Ops> and
// LmHeadLayer<Ops>, instantiated with the CPU kernels in gpt.cpp and with the CUDA ones in
// gpt_cuda.cu. An Ops value provides device() (where its buffers live), the kernels (the
// kernels/*.h contracts; its dense_forward/dense_backward take a slot, 0-3 within a block, for a
// twin that keeps per-product state such as bf16 copies; dense_forward adds an optional residual
// [rows, out] to its output, layernorm_backward an optional gradient to its dx, so that a twin can
// fold the residual stream's additions into those kernels), reserve_dense(slot, rows, in, out) and
// dense_scratch_floats(rows, out) (scratch of one dense backward pass), the tied head's products
// (head_forward: y = x w^T for a DenseShape {rows, D, V} and w = wte (V, D); head_backward:
// dx = dy w, dw += dy^T x) with reserve_head(rows, D, V) and head_scratch_floats(rows, V),
// layernorm_to_dense(slot, ...) and gelu_to_dense(slot, ...): the layer norm or GELU whose output
// is dense slot's next input, which a twin may write straight in the form its product reads (bf16),
// dense_gelu_to_dense(slot, next, shape, x, w, b, h, g, scratch): dense slot's product into the
// pre-activation h, then the GELU into g, dense next's input, which a twin may fuse (in a GEMM's
// epilogue; h then holds what its own gelu_dense_backward reads, and scratch, 4 N D floats, is
// free for it), gelu_dense_backward(slot, h, dg, ...): dense slot's backward pass with dy = the
// GELU's backward of dg at pre-activation h (dg may be overwritten), which a twin may fuse,
// and keeps_fp32_dense_inputs() (false: those outputs' fp32 buffers are not needed, y may be null),
// and for the attention
// attention_heads_floats / attention_probs_floats / attention_workspace_floats(shape): what the
// twin keeps from forward to backward (attention.h's heads and probabilities, or, for the flash
// kernels of attention_flash.h, Q, K and V in bf16 and one log-sum-exp per row) and the scratch it
// needs; attention_backward also gets the forward pass's output; attention_keeps_qkv(shape) (true:
// the qkv projection is written straight into the kept `heads` buffer, which the twin's kernels
// read in place, instead of the workspace; a twin may write it there in its own form, bf16 words).
//
// A block keeps what its backward pass reads (layer-norm outputs and statistics, attention heads
// and probabilities, the MLP's pre- and post-GELU values, the residual stream between its halves)
// in its own buffers, sized by reserve(); the model's shared workspace holds only what one pass
// needs (BlockLayer::workspace_floats lays it out). With LayerPlan::recompute it keeps less: gelu,
// the GELU's output (4 N D floats) is computed again from its input at the start of the backward
// pass; blocks, nothing of its own: the backward pass runs the forward pass again from the
// block's input (which the model keeps) into the front of the shared workspace, so one block's
// activations exist at a time instead of every block's, for about one more forward pass of
// compute. Used by one thread at a time. No collective calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kernels/dense.h"
#include "kernels/gemm.h"
#include "kernels/gpt/attention.h"
#include "kernels/gpt/embedding.h"
#include "kernels/gpt/layernorm.h"
#include "runtime/base/buffer.h"
#include "runtime/model/layer_registry.h"
#include "runtime/model/layers.h"

namespace lockstep {

// Offsets of a block's tensors (gpt.h: block_tensors) within its parameters, for D channels.
struct BlockOffsets {
  size_t ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b, fc_w, fc_b, mproj_w, mproj_b;
  explicit BlockOffsets(size_t d) {
    size_t at = 0;
    auto next = [&at](size_t n) { return std::exchange(at, at + n); };
    ln1_w = next(d), ln1_b = next(d);
    qkv_w = next(3 * d * d), qkv_b = next(3 * d);
    proj_w = next(d * d), proj_b = next(d);
    ln2_w = next(d), ln2_b = next(d);
    fc_w = next(4 * d * d), fc_b = next(4 * d);
    mproj_w = next(4 * d * d), mproj_b = next(d);
  }
};

// The vocabulary of an embed layer: its parameters are wte (V, D) then wpe (ctx, D).
inline int embed_vocab(const LayerPlan& p) {
  const size_t d = static_cast<size_t>(p.spec.args[0]), ctx = static_cast<size_t>(p.spec.args[1]);
  return static_cast<int>(p.params / d - ctx);
}

template <class Ops>
class EmbedLayer : public Layer {
 public:
  EmbedLayer(const LayerPlan& plan, Ops ops) : Layer(plan), ops_(std::move(ops)) {}
  void reserve(int max_batch) override {
    tokens_ = Buffer<int32_t>(ops_.device(), static_cast<size_t>(max_batch) * plan_.in[0]);
  }
  void forward(int batch, const float* x, float* y, float*) override {
    const kernels::EmbeddingShape s = shape(batch);
    ops_.tokens(x, tokens_.data(), static_cast<size_t>(batch) * s.seq, s.vocab);
    ops_.embedding_forward(s, tokens_.data(), params_, params_ + wpe_offset(), y);
  }
  // The first layer: no input gradient.
  void backward(int batch, const float*, const float*, const float* dy, float*, float*) override {
    ops_.embedding_backward(shape(batch), tokens_.data(), dy, grads_, grads_ + wpe_offset());
  }

 private:
  kernels::EmbeddingShape shape(int batch) const {
    return {batch, plan_.in[0], embed_vocab(plan_), plan_.spec.args[1], plan_.spec.args[0]};
  }
  size_t wpe_offset() const {
    return static_cast<size_t>(embed_vocab(plan_)) * static_cast<size_t>(plan_.spec.args[0]);
  }
  Ops ops_;
  Buffer<int32_t> tokens_;
};

template <class Ops>
class BlockLayer : public Layer {
 public:
  BlockLayer(const LayerPlan& plan, Ops ops)
      : Layer(plan),
        ops_(std::move(ops)),
        t_(plan.in[0]),
        d_(plan.in[1]),
        heads_(plan.spec.args[0]),
        at_(static_cast<size_t>(d_)) {}

  // Workspace: what the forward pass keeps for the backward one where it is recomputed there
  // (kept_in_workspace), then one pass's: the backward pass's gradients R1 [N, 4D] (MLP hidden,
  // then qkv), R2 [N, D] and R3 [N, D] (the residual stream's gradient between the halves), the
  // attention's scratch, and one dense backward's scratch; the forward pass uses less (qkv
  // [N, 3D] and the attention's).
  size_t workspace_floats(int batch) const override {
    const size_t nd = rows(batch) * static_cast<size_t>(d_);
    return kept_in_workspace(batch) + 6 * nd + ops_.attention_workspace_floats(attention(batch)) +
           ops_.dense_scratch_floats(rows(batch), 4 * d_);
  }
  void reserve(int max_batch) override {
    const size_t n = rows(max_batch), nd = n * static_cast<size_t>(d_);
    const DeviceKind where = ops_.device();
    const KeptSizes k = kept_sizes(max_batch);
    if (plan_.recompute != Recompute::blocks) {
      ln1_ = Buffer<float>(where, k.ln);
      ln2_ = Buffer<float>(where, k.ln);
      stats_ = Buffer<float>(where, 4 * n);
      heads_buf_ = Buffer<float>(where, k.heads);
      probs_ = Buffer<float>(where, k.probs);
      att_ = Buffer<float>(where, nd);
      x2_ = Buffer<float>(where, nd);
      h_ = Buffer<float>(where, 4 * nd);
      if (plan_.recompute == Recompute::none) g_ = Buffer<float>(where, k.g);
    }
    ops_.reserve_dense(0, n, d_, 3 * d_);
    ops_.reserve_dense(1, n, d_, d_);
    ops_.reserve_dense(2, n, d_, 4 * d_);
    ops_.reserve_dense(3, n, 4 * d_, d_);
  }

  void forward(int batch, const float* x, float* y, float* ws) override {
    run_forward(batch, x, y, kept(batch, ws), ws + kept_in_workspace(batch));
  }

  void backward(int batch, const float* x, const float*, const float* dy, float* dx,
                float* ws) override {
    const int n = static_cast<int>(rows(batch));
    const size_t nd = rows(batch) * static_cast<size_t>(d_);
    const Kept k = kept(batch, ws);
    ws += kept_in_workspace(batch);
    // What the forward pass did not keep, computed again from what it did (the block's input
    // alone, or the GELU's input): the same kernels on the same values, so the same bits.
    if (plan_.recompute == Recompute::blocks)
      run_forward(batch, x, nullptr, k, ws);
    else if (plan_.recompute == Recompute::gelu)
      ops_.gelu_to_dense(3, k.h, k.g, 4 * nd);
    const float* p = params_;
    float* g = grads_;
    float* r1 = ws;           // [N, 4D]: the MLP hidden gradient, later dqkv
    float* r2 = ws + 4 * nd;  // [N, D]: dln2, later the attention output's, later dln1
    float* r3 = ws + 5 * nd;  // [N, D]: the residual stream's gradient between the halves
    float* att_ws = ws + 6 * nd;
    float* dense_ws = att_ws + ops_.attention_workspace_floats(attention(batch));
    ops_.dense_backward(3, {n, 4 * d_, d_}, k.g, p + at_.mproj_w, dy, r1, g + at_.mproj_w,
                        g + at_.mproj_b, dense_ws);
    ops_.gelu_dense_backward(2, k.h, r1, {n, d_, 4 * d_}, k.ln2, p + at_.fc_w, r2, g + at_.fc_w,
                             g + at_.fc_b, dense_ws);
    ops_.layernorm_backward({n, d_}, k.x2, p + at_.ln2_w, k.mean[1], k.rstd[1], r2, r3,
                            g + at_.ln2_w, g + at_.ln2_b, dy);  // r3 = dln2 + dy
    ops_.dense_backward(1, {n, d_, d_}, k.att, p + at_.proj_w, r3, r2, g + at_.proj_w,
                        g + at_.proj_b, dense_ws);
    ops_.attention_backward(attention(batch), k.att, r2, k.heads, k.probs, r1, att_ws);
    ops_.dense_backward(0, {n, d_, 3 * d_}, k.ln1, p + at_.qkv_w, r1, r2, g + at_.qkv_w,
                        g + at_.qkv_b, dense_ws);
    ops_.layernorm_backward({n, d_}, x, p + at_.ln1_w, k.mean[0], k.rstd[0], r2, dx, g + at_.ln1_w,
                            g + at_.ln1_b, r3);  // dx = dln1 + r3
  }

 private:
  // What the forward pass keeps for the backward pass: layer-norm outputs and statistics, the
  // attention's heads (or qkv) and probabilities (or log-sum-exps), its output, the residual
  // stream between the halves, the MLP's pre- and post-GELU values.
  struct Kept {
    float *ln1, *ln2, *mean[2], *rstd[2], *heads, *probs, *att, *x2, *h, *g;
  };
  struct KeptSizes {
    size_t ln, heads, probs, g;  // the fp32 dense inputs (ln, g) only where the Ops read them
  };
  KeptSizes kept_sizes(int batch) const {
    const size_t nd = rows(batch) * static_cast<size_t>(d_);
    const size_t fp32 = ops_.keeps_fp32_dense_inputs() ? nd : 0;
    return {fp32, ops_.attention_heads_floats(attention(batch)),
            ops_.attention_probs_floats(attention(batch)), 4 * fp32};
  }
  // The floats at the front of the workspace that hold what is recomputed: the GELU's output, or
  // (blocks) everything the block keeps.
  size_t kept_in_workspace(int batch) const {
    if (plan_.recompute == Recompute::gelu) return kept_sizes(batch).g;
    if (plan_.recompute == Recompute::blocks) return carve(batch, nullptr, nullptr);
    return 0;
  }
  // The regions a block recomputed whole keeps at the front of the workspace, in this one order:
  // their total floats, and with `k`, each pointed into `ws` (a region the Ops do not keep,
  // count 0 - bf16 twins' fp32 dense inputs - is null, as the block's own empty buffers are).
  // Each region starts a multiple of 256 bytes from the workspace (cudaMalloc aligns it so), as
  // the buffers it stands in for do: a kernel that picks its algorithm by its operands' alignment
  // (cuBLASLt's epilogues, gemm.h) picks the same one for kept and recomputed blocks.
  size_t carve(int batch, float* ws, Kept* k) const {
    const size_t n = rows(batch), nd = n * static_cast<size_t>(d_);
    const KeptSizes s = kept_sizes(batch);
    Kept sizes_only{};
    Kept& d = k != nullptr ? *k : sizes_only;
    constexpr size_t kAlignFloats = 64;
    size_t at = 0;
    auto take = [&](float*& region, size_t count) {
      if (k != nullptr) region = count == 0 ? nullptr : ws + at;
      at += (count + kAlignFloats - 1) / kAlignFloats * kAlignFloats;
    };
    take(d.ln1, s.ln), take(d.ln2, s.ln);
    for (int j = 0; j < 2; ++j) take(d.mean[j], n), take(d.rstd[j], n);
    take(d.heads, s.heads), take(d.probs, s.probs), take(d.att, nd), take(d.x2, nd);
    take(d.h, 4 * nd), take(d.g, s.g);
    return at;
  }
  Kept kept(int batch, float* ws) {
    Kept k{};
    if (plan_.recompute == Recompute::blocks) {
      carve(batch, ws, &k);
      return k;
    }
    // Layer norm j's statistics at stats_[2j] and [2j + 1] quarters (sized for the largest batch).
    const size_t quarter = stats_.size() / 4;
    k.ln1 = ln1_.data(), k.ln2 = ln2_.data();
    for (int j = 0; j < 2; ++j)
      k.mean[j] = stats_.data() + 2 * j * quarter,
      k.rstd[j] = stats_.data() + (2 * j + 1) * quarter;
    k.heads = heads_buf_.data(), k.probs = probs_.data(), k.att = att_.data(), k.x2 = x2_.data();
    k.h = h_.data();
    k.g = plan_.recompute != Recompute::gelu ? g_.data()
          : kept_in_workspace(batch) > 0     ? ws
                                             : nullptr;
    return k;
  }

  // The forward pass into `k` with `ws` as its scratch; y null (a recomputation): the last
  // product, whose output only the next layer reads, is skipped.
  void run_forward(int batch, const float* x, float* y, const Kept& k, float* ws) {
    const int n = static_cast<int>(rows(batch));
    const size_t nd = rows(batch) * static_cast<size_t>(d_);
    const float* p = params_;
    float* qkv = ops_.attention_keeps_qkv(attention(batch)) ? k.heads : ws;
    float* scratch = ws + 3 * nd;
    ops_.layernorm_to_dense(0, {n, d_}, x, p + at_.ln1_w, p + at_.ln1_b, k.ln1, k.mean[0],
                            k.rstd[0]);
    ops_.dense_forward(0, {n, d_, 3 * d_}, k.ln1, p + at_.qkv_w, p + at_.qkv_b, qkv);
    ops_.attention_forward(attention(batch), qkv, k.att, k.heads, k.probs, scratch);
    ops_.dense_forward(1, {n, d_, d_}, k.att, p + at_.proj_w, p + at_.proj_b, k.x2,
                       x);  // x2 = x + proj(att)
    ops_.layernorm_to_dense(2, {n, d_}, k.x2, p + at_.ln2_w, p + at_.ln2_b, k.ln2, k.mean[1],
                            k.rstd[1]);
    ops_.dense_gelu_to_dense(2, 3, {n, d_, 4 * d_}, k.ln2, p + at_.fc_w, p + at_.fc_b, k.h, k.g,
                             ws);  // qkv and the attention's scratch are done with
    if (y == nullptr) return;
    ops_.dense_forward(3, {n, 4 * d_, d_}, k.g, p + at_.mproj_w, p + at_.mproj_b, y,
                       k.x2);  // y = x2 + mproj(g)
  }

  size_t rows(int batch) const { return static_cast<size_t>(batch) * static_cast<size_t>(t_); }
  kernels::AttentionShape attention(int batch) const { return {batch, t_, heads_, d_ / heads_}; }

  Ops ops_;
  int t_, d_, heads_;
  BlockOffsets at_;
  Buffer<float> ln1_, ln2_, stats_, heads_buf_, probs_, att_, x2_, h_, g_;
};

// Final layer norm, then logits = ln(x) wte^T with the embedding's wte (V, D) tied in: one GEMM
// each way through the Ops' head_forward / head_backward (fp32 products on the CPU and in fp32
// runs; bf16 products with fp32 accumulation in bf16 runs, where a GPT-2 vocabulary of 50,304
// makes the head a third of the model's products).
template <class Ops>
class LmHeadLayer : public Layer {
 public:
  LmHeadLayer(const LayerPlan& plan, Ops ops)
      : Layer(plan), ops_(std::move(ops)), t_(plan.in[0]), d_(plan.in[1]), v_(plan.out[1]) {}
  // dln [N, D], then the Ops' scratch of one backward pass.
  size_t workspace_floats(int batch) const override {
    return rows(batch) * d_ + ops_.head_scratch_floats(rows(batch), v_);
  }
  void reserve(int max_batch) override {
    ln_ = Buffer<float>(ops_.device(), rows(max_batch) * d_);
    stats_ = Buffer<float>(ops_.device(), 2 * rows(max_batch));
    ops_.reserve_head(rows(max_batch), d_, v_);
  }
  bool bf16_output_supported() const override { return ops_.head_bf16_logits(); }
  void set_bf16_output(bool on) override { logits16_ = on && ops_.head_bf16_logits(); }
  void forward(int batch, const float* x, float* y, float*) override {
    const int n = static_cast<int>(rows(batch));
    ops_.layernorm_forward({n, d_}, x, params_, params_ + d_, ln_.data(), stats_.data(),
                           stats_.data() + stats_.size() / 2);
    ops_.head_forward({n, d_, v_}, ln_.data(), tied_params_, y, logits16_);
  }
  void backward(int batch, const float* x, const float*, const float* dy, float* dx,
                float* ws) override {
    const int n = static_cast<int>(rows(batch));
    ops_.head_backward({n, d_, v_}, ln_.data(), tied_params_, dy, logits16_, ws, tied_grads_,
                       ws + rows(batch) * d_);
    ops_.layernorm_backward({n, d_}, x, params_, stats_.data(), stats_.data() + stats_.size() / 2,
                            ws, dx, grads_, grads_ + d_);
  }

 private:
  size_t rows(int batch) const { return static_cast<size_t>(batch) * static_cast<size_t>(t_); }
  Ops ops_;
  int t_, d_, v_;
  bool logits16_ = false;  // the logits and their gradient in bf16 words (set_bf16_output)
  Buffer<float> ln_, stats_;
};

}  // namespace lockstep
