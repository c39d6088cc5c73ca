#include "runtime/model/layers/gpt.h"

#include <algorithm>
#include <cmath>

#include "kernels/gpt/attention_flash_cpu.h"
#include "kernels/gpt/gelu.h"
#include "kernels/gpt/residual.h"
#include "kernels/onednn/onednn.h"
#include "runtime/base/knobs.h"
#include "runtime/model/layers/gpt_layers.h"

namespace lockstep {
namespace {

constexpr float kInitStd = 0.02f;  // GPT-2's

// The CPU kernels behind gpt_layers.h: OpenBLAS or oneDNN for the products (layers.h: CpuKernels),
// the project's loops for the rest.
struct CpuGptOps {
  bool onednn = false;
  bool flash = false;

  DeviceKind device() const { return DeviceKind::cpu; }
  void reserve_dense(int, size_t, int, int) {}
  bool keeps_fp32_dense_inputs() const { return true; }
  size_t dense_scratch_floats(size_t, int) const { return 0; }

  void tokens(const float* x, int32_t* t, size_t n, int vocab) {
    kernels::tokens_from_floats_cpu(x, t, n, vocab);
  }
  void embedding_forward(const kernels::EmbeddingShape& s, const int32_t* t, const float* wte,
                         const float* wpe, float* out) {
    kernels::embedding_forward_cpu(s, t, wte, wpe, out);
  }
  void embedding_backward(const kernels::EmbeddingShape& s, const int32_t* t, const float* dout,
                          float* dwte, float* dwpe) {
    kernels::embedding_backward_cpu(s, t, dout, dwte, dwpe);
  }
  void layernorm_forward(const kernels::LayerNormShape& s, const float* x, const float* gamma,
                         const float* beta, float* y, float* mean, float* rstd) {
    kernels::layernorm_forward_cpu(s, x, gamma, beta, y, mean, rstd);
  }
  void layernorm_backward(const kernels::LayerNormShape& s, const float* x, const float* gamma,
                          const float* mean, const float* rstd, const float* dy, float* dx,
                          float* dgamma, float* dbeta, const float* dx_add = nullptr) {
    kernels::layernorm_backward_cpu(s, x, gamma, mean, rstd, dy, dx, dgamma, dbeta);
    if (dx_add != nullptr && dx != nullptr)
      kernels::residual_accumulate_cpu(dx_add, dx, static_cast<size_t>(s.rows) * s.dim);
  }
  // The attention: flash-style (attention_flash_cpu.h) where the head width allows and
  // LOCKSTEP_CPU_ATTENTION does not ask for the materialised kernels (attention.h). The flash
  // kernels keep qkv itself for backward (the layer writes it into `heads`:
  // attention_keeps_qkv) and one log-sum-exp per row in `probs`, and need no workspace; the
  // materialised ones keep the heads rearranged and the T x T probabilities.
  bool attention_keeps_qkv(const kernels::AttentionShape&) const { return flash; }
  size_t attention_heads_floats(const kernels::AttentionShape& s) const {
    return kernels::attention_heads_floats(s);  // 3 B T C either way
  }
  size_t attention_probs_floats(const kernels::AttentionShape& s) const {
    return flash ? kernels::attention_flash_cpu_lse_floats(s) : kernels::attention_probs_floats(s);
  }
  size_t attention_workspace_floats(const kernels::AttentionShape& s) const {
    return flash ? 0 : kernels::attention_workspace_floats(s);
  }
  void attention_forward(const kernels::AttentionShape& s, const float* qkv, float* out,
                         float* heads, float* probs, float* ws) {
    if (flash)
      kernels::attention_flash_forward_cpu(s, qkv, out, probs);
    else if (onednn)
      kernels::attention_forward_onednn(s, qkv, out, heads, probs, ws);
    else
      kernels::attention_forward_cpu(s, qkv, out, heads, probs, ws);
  }
  void attention_backward(const kernels::AttentionShape& s, const float* out, const float* dout,
                          const float* heads, const float* probs, float* dqkv, float* ws) {
    if (flash)
      kernels::attention_flash_backward_cpu(s, heads, out, dout, probs, dqkv);
    else if (onednn)
      kernels::attention_backward_onednn(s, dout, heads, probs, dqkv, ws);
    else
      kernels::attention_backward_cpu(s, dout, heads, probs, dqkv, ws);
  }
  void layernorm_to_dense(int, const kernels::LayerNormShape& s, const float* x, const float* gamma,
                          const float* beta, float* y, float* mean, float* rstd) {
    layernorm_forward(s, x, gamma, beta, y, mean, rstd);
  }
  void gelu_to_dense(int, const float* x, float* y, size_t n) {
    kernels::gelu_forward_cpu(x, y, n);
  }
  void dense_gelu_to_dense(int slot, int next, const kernels::DenseShape& s, const float* x,
                           const float* w, const float* b, float* h, float* g, float*) {
    dense_forward(slot, s, x, w, b, h);
    gelu_to_dense(next, h, g, static_cast<size_t>(s.batch) * s.out);
  }
  void reserve_head(size_t, int, int) {}
  size_t head_scratch_floats(size_t, int) const { return 0; }
  // The CPU's logits are fp32 only (LmHeadLayer never asks it for bf16 ones).
  bool head_bf16_logits() const { return false; }
  void head_forward(const kernels::DenseShape& s, const float* x, const float* w, float* y, bool) {
    gemm({.m = s.batch, .n = s.out, .k = s.in, .trans_b = true}, x, w, y);
  }
  void head_backward(const kernels::DenseShape& s, const float* x, const float* w, const float* dy,
                     bool, float* dx, float* dw, float*) {
    gemm({.m = s.batch, .n = s.in, .k = s.out}, dy, w, dx);
    gemm({.m = s.out, .n = s.in, .k = s.batch, .trans_a = true, .beta = 1.0f}, dy, x, dw);
  }
  void gemm(const kernels::GemmShape& s, const float* a, const float* b, float* c) {
    if (onednn)
      kernels::gemm_onednn(s, a, b, c);
    else
      kernels::gemm_cpu(s, a, b, c);
  }
  void dense_forward(int, const kernels::DenseShape& s, const float* x, const float* w,
                     const float* b, float* y, const float* residual = nullptr) {
    if (onednn)
      kernels::dense_forward_onednn(s, x, w, b, y);
    else
      kernels::dense_forward_cpu(s, x, w, b, y);
    if (residual != nullptr)
      kernels::residual_add_cpu(residual, y, y, static_cast<size_t>(s.batch) * s.out);
  }
  void dense_backward(int, const kernels::DenseShape& s, const float* x, const float* w,
                      const float* dy, float* dx, float* dw, float* db, float*) {
    if (onednn)
      kernels::dense_backward_onednn(s, x, w, dy, dx, dw, db);
    else
      kernels::dense_backward_cpu(s, x, w, dy, dx, dw, db);
  }
  void gelu_dense_backward(int slot, const float* h, float* dg, const kernels::DenseShape& s,
                           const float* x, const float* w, float* dx, float* dw, float* db,
                           float* scratch) {
    kernels::gelu_backward_cpu(h, dg, dg, static_cast<size_t>(s.batch) * s.out);
    dense_backward(slot, s, x, w, dg, dx, dw, db, scratch);
  }
};

// Whether a block whose heads are head_dim wide takes the flash-style attention with the best CPU
// kernels (the oracle kernels, CpuKernels::openblas, keep the materialised one).
bool cpu_flash_attention(int head_dim) {
  return configured_knobs().cpu_attention == AttentionKnob::flash &&
         kernels::attention_flash_cpu_supported({.head_dim = head_dim});
}

// head_dim: the block's attention head width (0 for the layers without attention).
CpuGptOps cpu_ops(CpuKernels k, int head_dim = 0) {
  const bool best = k == CpuKernels::best;
  return {.onednn = best && kernels::onednn_built(),
          .flash = best && cpu_flash_attention(head_dim)};
}

int head_dim(const LayerPlan& block) { return block.in[1] / block.spec.args[0]; }

void need_sequence(const LayerPlan& p, const LayerCheck& check) {
  if (p.in.size() != 2)
    check.fail(" needs sequences of vectors (T, D), as 'embed' gives, but its input has shape " +
               to_string(p.in));
}

std::vector<LayerTensor> block_tensors(int64_t d) {
  return {{"ln1.weight", {d}},
          {"ln1.bias", {d}},
          {"attn.qkv.weight", {d, 3 * d}},
          {"attn.qkv.bias", {3 * d}},
          {"attn.proj.weight", {d, d}},
          {"attn.proj.bias", {d}},
          {"ln2.weight", {d}},
          {"ln2.bias", {d}},
          {"mlp.fc.weight", {d, 4 * d}},
          {"mlp.fc.bias", {4 * d}},
          {"mlp.proj.weight", {4 * d, d}},
          {"mlp.proj.bias", {d}}};
}

}  // namespace

LayerType embed_layer_type() {
  LayerType t;
  t.name = "embed";
  t.syntax = "embed:dim:ctx[:vocab]";
  t.parse = [](const LayerToken& tok) {
    tok.expect_args(2, 3);
    std::vector<int> args{tok.positive("dim", tok.args()[0]), tok.positive("ctx", tok.args()[1])};
    if (tok.args().size() == 3) args.push_back(tok.positive("vocab", tok.args()[2]));
    return args;
  };
  t.format = [](const LayerSpec& s) {
    std::string text = "embed";
    for (int a : s.args) {
      text += ':';
      text += std::to_string(a);
    }
    return text;
  };
  t.plan = [](LayerPlan& p, const LayerCheck& check) {
    if (check.earlier != nullptr && !check.earlier->empty())
      check.fail(" must be the model's first layer: it reads token ids");
    if (p.in.size() != 1)
      check.fail(" needs token sequences (T) but its input has shape " + to_string(p.in));
    const int dim = p.spec.args[0], ctx = p.spec.args[1];
    if (p.in[0] > ctx)
      check.fail(": the data's sequences have " + std::to_string(p.in[0]) +
                 " tokens, more than its context of " + std::to_string(ctx) +
                 " (raise ctx, or write the corpus with a smaller --seq-len)");
    // The vocabulary is the data's (its classes), or pinned by the spec (gpt:...,vocab=V), then
    // checked against the data's.
    if (p.spec.args.size() > 2 && p.spec.args[2] != check.outputs)
      check.fail(": its vocabulary of " + std::to_string(p.spec.args[2]) +
                 " tokens is not the data's " + std::to_string(check.outputs) +
                 " (the token split's vocab_size)");
    p.out = {p.in[0], dim};
    p.params =
        (static_cast<size_t>(check.outputs) + static_cast<size_t>(ctx)) * static_cast<size_t>(dim);
  };
  t.init = [](const LayerPlan& p, float* host, std::mt19937_64& gen) {
    fill_normal(host, p.params, kInitStd, gen);
  };
  t.tensors = [](const LayerPlan& p) {
    return std::vector<LayerTensor>{{"wte", {embed_vocab(p), p.spec.args[0]}},
                                    {"wpe", {p.spec.args[1], p.spec.args[0]}}};
  };
  t.make_cpu = [](const LayerPlan& p, CpuKernels k) -> std::unique_ptr<Layer> {
    return std::make_unique<EmbedLayer<CpuGptOps>>(p, cpu_ops(k));
  };
  t.make_cuda = make_embed_cuda;
  t.scratch_floats = [](const LayerPlan& p) { return static_cast<double>(p.in[0]); };
  return t;
}

LayerType block_layer_type() {
  LayerType t;
  t.name = "block";
  t.syntax = "block:heads";
  t.parse = [](const LayerToken& tok) {
    tok.expect_args(1, 1);
    return std::vector<int>{tok.positive("heads", tok.args()[0])};
  };
  t.format = [](const LayerSpec& s) { return "block:" + std::to_string(s.args[0]); };
  t.plan = [](LayerPlan& p, const LayerCheck& check) {
    need_sequence(p, check);
    const size_t d = static_cast<size_t>(p.in[1]);
    if (p.in[1] % p.spec.args[0] != 0)
      check.fail(": " + std::to_string(p.spec.args[0]) + " heads do not divide the " +
                 std::to_string(d) + " channels");
    p.out = p.in;
    p.params = 12 * d * d + 13 * d;
  };
  t.init = [](const LayerPlan& p, float* host, std::mt19937_64& gen) {
    size_t at = 0;
    for (const LayerTensor& x : block_tensors(p.in[1])) {
      size_t n = 1;
      for (int64_t e : x.shape) n *= static_cast<size_t>(e);
      if (x.shape.size() == 2)
        fill_normal(host + at, n, kInitStd, gen);
      else
        std::fill(host + at, host + at + n, x.name.ends_with(".weight") ? 1.0f : 0.0f);
      at += n;
    }
  };
  t.tensors = [](const LayerPlan& p) { return block_tensors(p.in[1]); };
  t.make_cpu = [](const LayerPlan& p, CpuKernels k) -> std::unique_ptr<Layer> {
    return std::make_unique<BlockLayer<CpuGptOps>>(p, cpu_ops(k, head_dim(p)));
  };
  t.make_cuda = make_block_cuda;
  // The dense products (12 D^2 per token) and the two attention products (T^2 D each, the masked
  // half included, as llm.c and PyTorch's counts do: the flash kernels skip most of it).
  t.forward_flops = [](const LayerPlan& p) {
    const double tt = p.in[0], d = p.in[1];
    return 2.0 * tt * 12.0 * d * d + 4.0 * tt * tt * d;
  };
  // What the block keeps for its backward pass (gpt_layers.h) on the CPU: the attention's T x T
  // probabilities per head, or with the flash kernels one log-sum-exp per position and head.
  t.recomputes = true;
  t.scratch_floats = [](const LayerPlan& p) {
    const double tt = p.in[0], d = p.in[1], h = p.spec.args[0];
    return 15.0 * tt * d + h * tt * (cpu_flash_attention(head_dim(p)) ? 1.0 : tt) + 4.0 * tt;
  };
  return t;
}

LayerType lmhead_layer_type() {
  LayerType t;
  t.name = "lmhead";
  t.syntax = "lmhead";
  t.parse = [](const LayerToken& tok) {
    tok.expect_args(0, 0);
    return std::vector<int>{};
  };
  t.format = [](const LayerSpec&) { return std::string("lmhead"); };
  t.plan = [](LayerPlan& p, const LayerCheck& check) {
    need_sequence(p, check);
    int embed = -1;
    for (size_t i = check.earlier ? check.earlier->size() : 0; i-- > 0;)
      if ((*check.earlier)[i].spec.type == "embed") {
        embed = static_cast<int>(i);
        break;
      }
    if (embed < 0) check.fail(" ties its output to the token embedding: put 'embed' first");
    const LayerPlan& e = (*check.earlier)[static_cast<size_t>(embed)];
    if (e.spec.args[0] != p.in[1])
      check.fail(": its input has " + std::to_string(p.in[1]) + " channels but the embedding " +
                 std::to_string(e.spec.args[0]));
    p.out = {p.in[0], embed_vocab(e)};
    p.params = 2 * static_cast<size_t>(p.in[1]);
    p.tied = embed;
  };
  t.init = [](const LayerPlan& p, float* host, std::mt19937_64&) {
    std::fill(host, host + p.params / 2, 1.0f);
    std::fill(host + p.params / 2, host + p.params, 0.0f);
  };
  t.tensors = [](const LayerPlan& p) {
    return std::vector<LayerTensor>{{"ln.weight", {p.in[1]}}, {"ln.bias", {p.in[1]}}};
  };
  t.make_cpu = [](const LayerPlan& p, CpuKernels k) -> std::unique_ptr<Layer> {
    return std::make_unique<LmHeadLayer<CpuGptOps>>(p, cpu_ops(k));
  };
  t.make_cuda = make_lmhead_cuda;
  t.forward_flops = [](const LayerPlan& p) {
    return 2.0 * p.in[0] * static_cast<double>(p.in[1]) * p.out[1];
  };
  t.scratch_floats = [](const LayerPlan& p) {
    return static_cast<double>(p.in[0]) * (p.in[1] + 2.0);
  };
  return t;
}

}  // namespace lockstep
