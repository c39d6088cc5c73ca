// The peak that lockstep-bench train measures its achieved FLOP/s against, in the same run: this
// rank's rate for its fastest kernel, all ranks starting together at a barrier (so the rates add
// up to what the machine gives them at once). On the CPU every GEMM and convolution kernel the
// build has, with the rank's threads, timed by the host clock: OpenBLAS's sgemm and, with oneDNN,
// its matmul (both one n x n x n product) and its convolution at the CNN's conv2 shape, called as
// the layers call it (NHWC in and out); the caller takes the fastest. On a GPU a cuBLAS GEMM on
// the rank's current device, fp32 or bf16 with fp32 accumulation (as the bf16 layers run), timed
// by CUDA events on a stream of its own. Collective over `comm` (barriers): every rank calls it
// with the same n.
#pragma once

#include <string>
#include <vector>

#include "runtime/base/communicator.h"
#include "runtime/base/precision.h"

namespace lockstep::bench {

struct KernelRate {
  std::string name;  // "OpenBLAS sgemm 2048^3", "oneDNN convolution 64x14x14x32->64 3x3", ...
  double rate = 0;   // FLOP/s of this rank, the best of a few timed repetitions
};

// The CPU kernels above, OpenBLAS's sgemm timed last (FLOPs: 2 n^3 per product, 2 per
// multiply-add of the convolution); the convolutions only with `convolutions` (a model that has
// convolution layers: a transformer's or an MLP's peak is the GEMMs').
std::vector<KernelRate> host_kernel_rates(Communicator& comm, int n, bool convolutions = true);
// FLOP/s (2 n^3 per product), the best of a few timed repetitions.
double device_gemm_rate(Communicator& comm, int n, Precision precision);

}  // namespace lockstep::bench
