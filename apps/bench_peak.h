// The peak that lockstep-bench train measures its achieved FLOP/s against, in the same run: this
// rank's rate for one large n x n x n matrix product, all ranks starting together at a barrier
// (so the rates add up to what the machine gives them at once). On the CPU an sgemm with the
// rank's BLAS threads, timed by the host clock; on a GPU a cuBLAS GEMM on the rank's current
// device, fp32 or bf16 with fp32 accumulation (as the bf16 layers run), timed by CUDA events on a
// stream of its own. Collective over `comm` (barriers): every rank calls it with the same n.
#pragma once

#include "runtime/communicator.h"
#include "runtime/precision.h"

namespace lockstep::bench {

// FLOP/s (2 n^3 per product), the best of a few timed repetitions.
double host_gemm_rate(Communicator& comm, int n);
double device_gemm_rate(Communicator& comm, int n, Precision precision);

}  // namespace lockstep::bench
