// A GPT's next-token logits one position at a time with a key/value cache, on the CPU: what
// generation needs (sample_text.h), without running the whole window through the model per token.
//
// Built from a gpt: model's parameters (Model::param_tensors names and layouts, copied to the host
// once: embedN.wte (V, D), embedN.wpe (T, D), blockN.{ln1, attn.qkv, attn.proj, ln2, mlp.fc,
// mlp.proj}.{weight, bias}, lmheadN.ln.{weight, bias}), it computes exactly the model's function
// (gpt_layers.h: pre-norm blocks, causal attention with scale 1/sqrt(head_dim), tanh GELU, the head
// tied to wte) with the same CPU kernels (dense, layer norm, GELU) on one row, keeping each block's
// keys and values of the positions so far. step(token) appends the token at the next position
// (positions 0 .. ctx - 1) and returns its logits; reset() starts a new text. The results agree
// with the model's to float rounding (sums of another length and order), not bit for bit.
// Used by one thread. No collective calls.
#pragma once

#include <vector>

#include "runtime/model/model.h"

namespace lockstep {

class GptDecoder {
 public:
  // Throws UsageError when `model` is not a gpt: model (an embed, blocks, an lmhead).
  explicit GptDecoder(const Model& model);

  int context() const { return ctx_; }
  int vocab() const { return vocab_; }
  int position() const { return pos_; }  // tokens in the cache
  void reset() { pos_ = 0; }
  // Logits (vocab values) after appending `token` at position(); valid until the next step.
  // Requires position() < context() and 0 <= token < vocab().
  const float* step(int token);

 private:
  struct Block {
    const float *ln1_w, *ln1_b, *qkv_w, *qkv_b, *proj_w, *proj_b, *ln2_w, *ln2_b, *fc_w, *fc_b,
        *mproj_w, *mproj_b;
    std::vector<float> keys, values;  // [ctx, D]
  };
  std::vector<float> params_;
  const float *wte_ = nullptr, *wpe_ = nullptr, *lnf_w_ = nullptr, *lnf_b_ = nullptr;
  std::vector<Block> blocks_;
  int ctx_ = 0, vocab_ = 0, dim_ = 0, heads_ = 0, pos_ = 0;
  std::vector<float> x_, h_, qkv_, att_, tmp_, hidden_, act_, scores_, logits_;
};

}  // namespace lockstep
