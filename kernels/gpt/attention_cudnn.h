// Causal self-attention through cuDNN's fused flash attention (bf16 runs on a GPU, chosen with
// LOCKSTEP_CUDA_ATTENTION=cudnn): the function of attention_flash.h, computed by cuDNN's scaled
// dot-product attention graphs (built with NVIDIA's cudnn-frontend headers, cuDNN 9) instead of
// our own kernels, so that the two can be timed side by side. Built where CMake found the frontend
// (scripts/setup.sh installs it from PyPI); elsewhere attention_cudnn_stub.cpp says it is not.
//
// The layout is attention_flash.h's: qkv [batch, seq, 3C] fp32 in, out [batch, seq, C] fp32. The
// forward pass rounds qkv to bf16 head by head into `heads` (the flash kernels' rounding, the same
// words) and keeps there too cuDNN's bf16 output, which the backward pass reads; lse [batch * heads
// * seq] holds cuDNN's softmax statistics (each query row's log-sum-exp of its scaled scores).
// out is that bf16 output widened to fp32. The backward pass rounds dout to bf16, lets cuDNN write
// dQ, dK, dV in bf16 into the packed [batch, seq, 3C] layout in `workspace`, and widens them into
// dqkv. cuDNN's own workspace is allocated with the graphs. The backward graph asks for cuDNN's
// deterministic algorithm: the same bits run after run, as the flash kernels.
//
// The graphs are built per (device, shape) at the first call, which must not be inside a CUDA
// graph capture (the trainer's first steps run uncaptured: docs/DESIGN.md decision 18). Where
// cuDNN refuses a shape, attention_cudnn_usable says so (with cuDNN's message) and the caller keeps
// its own kernels. No buffer may alias another; every pointer starts on a 16-byte boundary.
// Callable from several threads on separate buffers (graphs and handles are per thread). No
// collective calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/cuda/stream.h"
#include "kernels/gpt/attention.h"

namespace lockstep::kernels {

// Whether this build has the cuDNN attention at all (the frontend's headers were found).
bool attention_cudnn_built();

// Builds (once per device, thread, shape and layout) the forward and backward graphs for s on the
// current device and says whether cuDNN took both; where it did not, `why` (if given) gets its
// message. packed: the graphs of the _packed calls below (Q, K and V read from the qkv product's
// words), else those of the others. Needs a CUDA device; never throws for a refusal.
bool attention_cudnn_usable(const AttentionShape& s, std::string* why = nullptr,
                            bool packed = false);

size_t attention_cudnn_heads_floats(const AttentionShape& s);      // 4 * B * T * C bf16 words
size_t attention_cudnn_lse_floats(const AttentionShape& s);        // B * H * T
size_t attention_cudnn_workspace_floats(const AttentionShape& s);  // 4 * B * T * C bf16 words

// Throw std::invalid_argument for a bad shape or pointer, std::runtime_error where
// attention_cudnn_usable(s) is false or cuDNN fails.
void attention_cudnn_forward_cuda(const AttentionShape& s, const float* qkv, float* out,
                                  uint16_t* heads, float* lse, cudaStream_t stream);
// Overwrites dqkv [batch, seq, 3C] from dout [batch, seq, C] and the forward pass's heads and lse.
void attention_cudnn_backward_cuda(const AttentionShape& s, const uint16_t* heads, const float* lse,
                                   const float* dout, float* dqkv, float* workspace,
                                   cudaStream_t stream);

// The same in bf16 at the edges, for a block whose products read and write bf16 (gpt_cuda.cu):
// forward writes the output's words to out16 [batch, seq, C] (what the calls above widen into
// out: the projection's input as it is), which backward reads again as cuDNN's O; backward writes
// dQ, dK and dV's words to dqkv16 [batch, seq, 3C] (what the calls above widen into dqkv: the qkv
// product's dy as it is). heads needs 3 B T C words here (Q, K, V); the workspace is as above.
void attention_cudnn_forward_bf16_cuda(const AttentionShape& s, const float* qkv, uint16_t* out16,
                                       uint16_t* heads, float* lse, cudaStream_t stream);
void attention_cudnn_backward_bf16_cuda(const AttentionShape& s, const uint16_t* heads,
                                        const uint16_t* out16, const float* lse, const float* dout,
                                        uint16_t* dqkv16, float* workspace, cudaStream_t stream);

// The same with Q, K and V read in place from qkv16 [batch, seq, 3C], the qkv product's bf16 words
// as it writes them (gemm_bf16_bias_out_cuda; Q in columns [0, C) of a row, K in [C, 2C), V in
// [2C, 3C)), which the backward pass reads again: no copy into heads, no rounding pass. The
// output's words go to out16 [batch, seq, C], which backward reads as cuDNN's O; backward takes
// dO's words dout16 [batch, seq, C] (the projection's backward product writes them so) and writes
// dQ, dK and dV's to dqkv16 [batch, seq, 3C]. No workspace of the caller's. The bits of the calls
// above given the same words (those round qkv to them first).
void attention_cudnn_forward_packed_cuda(const AttentionShape& s, const uint16_t* qkv16,
                                         uint16_t* out16, float* lse, cudaStream_t stream);
void attention_cudnn_backward_packed_cuda(const AttentionShape& s, const uint16_t* qkv16,
                                          const uint16_t* out16, const float* lse,
                                          const uint16_t* dout16, uint16_t* dqkv16,
                                          cudaStream_t stream);

}  // namespace lockstep::kernels
