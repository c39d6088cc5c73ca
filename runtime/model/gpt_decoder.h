// A GPT's next-token logits one position at a time with a key/value cache, on the model's device:
// what generation needs (sample_text.h), without running the whole window through the model per
// token.
//
// Built from a gpt: model's parameters (Model::param_tensors names and layouts: embedN.wte (V, D),
// embedN.wpe (T, D), blockN.{ln1, attn.qkv, attn.proj, ln2, mlp.fc, mlp.proj}.{weight, bias},
// lmheadN.ln.{weight, bias}), it computes exactly the model's function (gpt_layers.h: pre-norm
// blocks, causal attention with scale 1/sqrt(head_dim), tanh GELU, the head tied to wte) on one
// row, keeping each block's keys and values of the positions so far. On the CPU the parameters are
// copied to the host once and the step runs the CPU kernels (dense, layer norm, GELU); on a GPU it
// reads the model's device parameters in place (the model must outlive the decoder and not change
// them while it decodes), keeps the cache in device memory and runs the CUDA twins with
// kernels/gpt/decode.h's embedding, cache write and single-query attention, on the model's stream
// (or, for a model on the legacy default stream, which cannot be captured, a stream of its own),
// the position and the token read from device memory: after a first step launched kernel by kernel,
// the step is captured once as a CUDA graph and replayed for every later token (one launch instead
// of some 200; a capture that fails leaves the decoder launching kernel by kernel, the same kernels
// and so the same bits); the logits come back to the host once per step. step(token) appends the
// token at the next position (positions 0 .. ctx - 1) and returns its logits (host memory); reset()
// starts a new text. The results agree with the model's to float rounding (sums of another length
// and order), not bit for bit. Used by one thread. No collective calls.
#pragma once

#include <vector>

#include "kernels/cuda/memory.h"
#include "runtime/model/model.h"

namespace lockstep {

class GptDecoder {
 public:
  // Throws UsageError when `model` is not a gpt: model (an embed, blocks, an lmhead).
  explicit GptDecoder(const Model& model);
  ~GptDecoder();
  GptDecoder(const GptDecoder&) = delete;
  GptDecoder& operator=(const GptDecoder&) = delete;

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
    Buffer<float> keys, values;  // [ctx, D], where the model computes
  };
  void step_cpu(int token);
  void step_cuda(int token);
  void enqueue_cuda();  // the device step's kernels, at the position and token in at_

  DeviceKind device_;
  cudaStream_t stream_ = nullptr;        // the model's, else owned_stream_
  cudaStream_t owned_stream_ = nullptr;  // created when the model has none (a GPU's)
  std::vector<float> params_;  // the CPU's copy (empty on a GPU: the model's own are read)
  const float *wte_ = nullptr, *wpe_ = nullptr, *lnf_w_ = nullptr, *lnf_b_ = nullptr;
  std::vector<Block> blocks_;
  int ctx_ = 0, vocab_ = 0, dim_ = 0, heads_ = 0, pos_ = 0;
  // Scratch of one row, where the model computes; `scores_` (CPU) and the host logits.
  Buffer<float> x_, h_, qkv_, att_, tmp_, hidden_, act_, logits_, stats_;
  std::vector<float> scores_, host_logits_;
  // A GPU's position and token: at_ on the device, written from page-locked at_host_ before each
  // step; the step's CUDA graph once captured (graph_tried_: captured or given up).
  Buffer<int> at_;
  int* at_host_ = nullptr;
  cudaGraphExec_t graph_ = nullptr;
  bool graph_tried_ = false;
  int eager_steps_ = 0;
};

}  // namespace lockstep
