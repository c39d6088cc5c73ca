// The CUDA twins of the GPT layers (gpt.cpp): gpt_layers.h over the kernels' CUDA launchers, on the
// model's stream and in device memory. With Precision::bf16 a block's four dense products run as
// bf16 GEMMs with fp32 accumulation (the weight copy cast at every forward, as cuda_layer.h
// explains; each input's bf16 copy kept for its backward pass) and attention runs flash-style on
// bf16 tensor-core tiles (attention_flash.h) where the head width allows; layer norms, GELU, the
// embedding and the tied head stay fp32, as do all activations between the kernels. Plain C++ over the launchers: a .cu only so that it is
// built with CUDA and gpt_cuda_stub.cpp without.
#include <array>
#include <cstdlib>
#include <string>

#include "kernels/cast.h"
#include "kernels/gpt/attention_flash.h"
#include "kernels/gpt/gelu.h"
#include "kernels/gpt/residual.h"
#include "runtime/base/error.h"
#include "runtime/model/layers/gpt.h"
#include "runtime/model/layers/gpt_layers.h"

namespace lockstep {
namespace {

// LOCKSTEP_CUDA_ATTENTION: flash (the default: the flash kernels in bf16 runs) or materialised
// (attention.h's exact path in both precisions, for comparison).
bool flash_allowed() {
  const char* env = std::getenv("LOCKSTEP_CUDA_ATTENTION");
  const std::string a = env != nullptr ? env : "";
  if (a.empty() || a == "flash") return true;
  if (a == "materialised") return false;
  throw UsageError("LOCKSTEP_CUDA_ATTENTION='" + a + "': expected flash or materialised");
}

class CudaGptOps {
 public:
  // head_dim: the block's attention head width (0 for the layers without attention).
  explicit CudaGptOps(const CudaLayerPlacement& where, int head_dim = 0)
      : stream_(where.stream),
        bf16_(where.precision == Precision::bf16),
        flash_(bf16_ && flash_allowed() &&
               kernels::attention_flash_supported({.head_dim = head_dim})) {}

  DeviceKind device() const { return DeviceKind::cuda; }
  void reserve_dense(int slot, size_t rows, int in, int out) {
    if (!bf16_) return;
    const size_t i = static_cast<size_t>(slot);
    w16_[i] = Buffer<uint16_t>(DeviceKind::cuda, static_cast<size_t>(in) * out);
    x16_[i] = Buffer<uint16_t>(DeviceKind::cuda, rows * static_cast<size_t>(in));
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
                          float* dgamma, float* dbeta) {
    kernels::layernorm_backward_cuda(s, x, gamma, mean, rstd, dy, dx, dgamma, dbeta, stream_);
  }
  // bf16 runs take the flash kernels where the head width allows (attention_flash.h): Q, K and V
  // kept in bf16 for backward with one log-sum-exp per row; fp32 runs keep the exact materialised
  // path (attention.h).
  size_t attention_heads_floats(const kernels::AttentionShape& s) const {
    return flash_ ? kernels::attention_flash_heads_floats(s) : kernels::attention_heads_floats(s);
  }
  size_t attention_probs_floats(const kernels::AttentionShape& s) const {
    return flash_ ? kernels::attention_flash_lse_floats(s) : kernels::attention_probs_floats(s);
  }
  size_t attention_workspace_floats(const kernels::AttentionShape& s) const {
    return flash_ ? kernels::attention_flash_workspace_floats(s)
                  : kernels::attention_workspace_floats(s);
  }
  void attention_forward(const kernels::AttentionShape& s, const float* qkv, float* out,
                         float* heads, float* probs, float* ws) {
    if (flash_)
      kernels::attention_flash_forward_cuda(s, qkv, out, reinterpret_cast<uint16_t*>(heads), probs,
                                            stream_);
    else
      kernels::attention_forward_cuda(s, qkv, out, heads, probs, ws, stream_);
  }
  void attention_backward(const kernels::AttentionShape& s, const float* out, const float* dout,
                          const float* heads, const float* probs, float* dqkv, float* ws) {
    if (flash_)
      kernels::attention_flash_backward_cuda(s, reinterpret_cast<const uint16_t*>(heads), out,
                                             probs, dout, dqkv, ws, stream_);
    else
      kernels::attention_backward_cuda(s, dout, heads, probs, dqkv, ws, stream_);
  }
  void gelu_forward(const float* x, float* y, size_t n) {
    kernels::gelu_forward_cuda(x, y, n, stream_);
  }
  void gelu_backward(const float* x, const float* dy, float* dx, size_t n) {
    kernels::gelu_backward_cuda(x, dy, dx, n, stream_);
  }
  void residual_add(const float* a, const float* b, float* y, size_t n) {
    kernels::residual_add_cuda(a, b, y, n, stream_);
  }
  void residual_accumulate(const float* src, float* dst, size_t n) {
    kernels::residual_accumulate_cuda(src, dst, n, stream_);
  }
  void gemm(const kernels::GemmShape& s, const float* a, const float* b, float* c) {
    kernels::gemm_cuda(s, a, b, c, stream_);
  }
  void dense_forward(int slot, const kernels::DenseShape& s, const float* x, const float* w,
                     const float* b, float* y) {
    if (!bf16_) {
      kernels::dense_forward_cuda(s, x, w, b, y, stream_);
      return;
    }
    const size_t i = static_cast<size_t>(slot);
    kernels::cast_f32_to_bf16_cuda(w, w16_[i].data(), w16_[i].size(), stream_);
    kernels::dense_forward_bf16_cuda(s, x, w16_[i].data(), b, y, x16_[i].data(), stream_);
  }
  void dense_backward(int slot, const kernels::DenseShape& s, const float* x, const float* w,
                      const float* dy, float* dx, float* dw, float* db, float* scratch) {
    if (!bf16_) {
      kernels::dense_backward_cuda(s, x, w, dy, dx, dw, db, stream_);
      return;
    }
    const size_t i = static_cast<size_t>(slot);
    kernels::dense_backward_bf16_cuda(s, x16_[i].data(), w16_[i].data(), dy, dx, dw, db,
                                      reinterpret_cast<uint16_t*>(scratch), stream_);
  }

 private:
  cudaStream_t stream_;
  bool bf16_, flash_;
  std::array<Buffer<uint16_t>, 4> w16_, x16_;  // per dense slot of a block (bf16 only)
};

}  // namespace

std::unique_ptr<Layer> make_embed_cuda(const LayerPlan& plan, const CudaLayerPlacement& where) {
  return std::make_unique<EmbedLayer<CudaGptOps>>(plan, CudaGptOps(where));
}
std::unique_ptr<Layer> make_block_cuda(const LayerPlan& plan, const CudaLayerPlacement& where) {
  return std::make_unique<BlockLayer<CudaGptOps>>(
      plan, CudaGptOps(where, plan.in[1] / plan.spec.args[0]));
}
std::unique_ptr<Layer> make_lmhead_cuda(const LayerPlan& plan, const CudaLayerPlacement& where) {
  return std::make_unique<LmHeadLayer<CudaGptOps>>(plan, CudaGptOps(where));
}

}  // namespace lockstep
