// Winograd F(4x4, 3x3) convolution on the CPU, every pass, for 3x3 stride-1 convolutions with
// padding 1 whose input and output channels are multiples of 16, on activations in oneDNN's
// 16-channel blocks (aBcd16b, conv2d.h's Conv2dIo) or NHWC: the CNN's second convolution, where
// oneDNN's own Winograd kernel (jit_wino_4x3) was most of the step and this one takes less time
// (docs/PERFORMANCE.md, "Winograd kernels of our own"). Each 4x4 output tile is computed from its
// 6x6 input patch as A^T [(G g G^T) . (B^T d B)] A (Lavin and Gray's matrices, interpolation points
// 0, +-1, +-2 and infinity); the products of the 36 transformed positions are small GEMMs over the
// channels, computed per image while its transforms are in the core's L2. The input gradient is the
// same convolution of dy with the kernel rotated and its channels swapped; the weight gradient is
// the forward formula's own gradient, G^T [sum over tiles of (B^T d B) (A dY A^T)] G, summed per
// fixed chunk of images and the chunks added in order: the same bits at any thread count.
// Rounding differs from the direct algorithm's by about 1e-6 of the largest output, as oneDNN's.
//
// AVX-512 (one register per 16 channels) or AVX2 with FMA (two, and smaller product blocks for
// its 16 registers), one build of each in the library, picked by the CPU (parallel.h): layers take
// it where winograd_preferred(s); elsewhere oneDNN's or OpenBLAS's twins. The two builds contract
// different multiply-adds, so their results differ by rounding (each within the tolerance of the
// direct algorithm); within a build the two layouts give the same bits. Stateless functions:
// threads may call them on separate buffers (their scratch is per thread). No collective calls.
#pragma once

#include <cstdint>

#include "kernels/conv/conv2d.h"

namespace lockstep::kernels {

// 3x3, stride 1, padding 1, c_in and c_out multiples of 16. s.relu (forward only) is supported.
bool winograd_supported(const Conv2dShape& s);
// Whether this CPU runs it (AVX-512F, or AVX2 and FMA; LOCKSTEP_CPU_ISA=baseline turns both off
// and =avx2 the first: parallel.h).
bool winograd_fast();
// Whether layers take it on NHWC activations: where it runs in its AVX2 build (no AVX-512 here, or
// LOCKSTEP_CPU_ISA=avx2), oneDNN keeps no 16-channel blocks between layers and has no Winograd.
bool winograd_on_nhwc();
// Whether a layer should take it over oneDNN's kernels: supported, fast here, and small enough
// images that one image's transforms (its tiles x 36 x (c_in + c_out) floats) stay within 1 MiB
// of a core's L2, the regime it was measured in (docs/PERFORMANCE.md); larger images are left to
// oneDNN, whose kernels block them for the cache.
bool winograd_preferred(const Conv2dShape& s);

// blocked: x is n x c_in/16 x h x w x 16 and y n x c_out/16 x h x w x 16; else both NHWC. y
// overwritten, w HWIO, b[c_out]. Throws std::invalid_argument for a shape winograd_supported
// refuses, std::logic_error where winograd_fast() is false.
void winograd_forward_cpu(const Conv2dShape& s, const float* x, const float* w, const float* b,
                          float* y, bool blocked = true);
// dx (x's layout) overwritten, skipped when null; dw (HWIO) and db accumulated (+=), db skipped
// when null.
void winograd_backward_cpu(const Conv2dShape& s, const float* x, const float* w, const float* dy,
                           float* dx, float* dw, float* db, bool blocked = true);

// The convolution and the 2x2 max-pool of stride 2 after it (floor: a trailing odd row or column
// dropped) in one pass over the tiles, with a ReLU after the pool when `relu`: the pooled output
// y (n x h/2 x w/2 x c_out, in 16-channel blocks when y_blocked16, else NHWC) is written from each
// tile's outputs while they are in registers, and the full-size output never is. argmax, a byte
// per value of y in y's order (as conv_pool.h's): its window's winning tap (ky * 2 + kx; the first
// maximum keeps a tie), -1 where the ReLU gave 0. The same values, ties and gradients, bit for bit,
// as winograd_forward_cpu then maxpool_forward_cpu (NHWC) or maxpool_forward_blocked16_cpu
// (blocked) with its ReLU, and their backward passes. s.relu must be false; x's and the (unwritten)
// convolution output's layout is `blocked`, as above. Throws std::invalid_argument as
// winograd_forward_cpu, and for an image under 2x2.
void winograd_pool_forward_cpu(const Conv2dShape& s, const float* x, const float* w, const float* b,
                               float* y, int8_t* argmax, bool relu, bool blocked, bool y_blocked16);
// From the pooled gradient dy (y's layout) and the forward's argmax: dx as winograd_backward_cpu
// (skipped when null), dw and db accumulated. Each image's gradient before the pool is expanded in
// a per-thread buffer as the passes reach it, never in full.
void winograd_pool_backward_cpu(const Conv2dShape& s, const float* x, const float* w,
                                const float* dy, const int8_t* argmax, float* dx, float* dw,
                                float* db, bool blocked, bool dy_blocked16);

}  // namespace lockstep::kernels
