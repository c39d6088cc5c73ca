// The layer types of a GPT-style (GPT-2) decoder-only language model over byte tokens, which the
// "gpt" preset of --model stacks (model_spec.h):
//   "embed:D:ctx"  token ids (T) -> (T, D): wte[token] + wpe[position]; parameters wte (V, D),
//                  wpe (ctx, D), V the data's classes; the first layer of a language model.
//   "block:H"      (T, D) -> (T, D), one transformer block with H heads: x + attn(ln1(x)), then
//                  x + mlp(ln2(x)) with a GELU (tanh) MLP of width 4D; parameters
//                  ln1.{weight,bias}, attn.qkv.{weight (D, 3D), bias}, attn.proj.{weight (D, D),
//                  bias}, ln2.{weight,bias}, mlp.fc.{weight (D, 4D), bias}, mlp.proj.{weight (4D,
//                  D), bias}.
//   "lmhead"       (T, D) -> (T, V): the final layer norm ln.{weight,bias}, then logits =
//                  ln(x) wte^T with the nearest earlier embed layer's wte (tied: LayerPlan::tied).
// Dense weights are stored (in, out), y = x W + b. Initialisation as GPT-2: weights and embeddings
// normal with standard deviation 0.02, biases 0, layer-norm scales 1.
// gpt.cpp holds the types and the CPU layers; gpt_cuda.cu the CUDA twins (gpt_layers.h is their
// common code); gpt_cuda_stub.cpp stands in without CUDA. The type functions are thread-safe; a
// layer is used by one thread at a time. No collective calls.
#pragma once

#include <memory>

#include "runtime/model/layer_registry.h"

namespace lockstep {

LayerType embed_layer_type();
LayerType block_layer_type();
LayerType lmhead_layer_type();

std::unique_ptr<Layer> make_embed_cuda(const LayerPlan& plan, const CudaLayerPlacement& where);
std::unique_ptr<Layer> make_block_cuda(const LayerPlan& plan, const CudaLayerPlacement& where);
std::unique_ptr<Layer> make_lmhead_cuda(const LayerPlan& plan, const CudaLayerPlacement& where);

// The MLP products, forward or backward, that LOCKSTEP_CUDA_GELU=epilogue gave cuBLASLt's GELU
// epilogues in this process and that ran the GELU pass instead (each kind said once on stderr):
// what the GPU tests check, as a message said once may have been said by an earlier test.
long cuda_gelu_epilogue_refusals();

}  // namespace lockstep
