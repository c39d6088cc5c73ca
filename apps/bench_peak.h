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

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "kernels/cuda/memory.h"
#include "runtime/base/communicator.h"
#include "runtime/base/precision.h"

namespace lockstep::bench {

// The seconds of one call of `run`, by the host clock.
template <class Run>
double host_seconds(Run run) {
  const auto t0 = std::chrono::steady_clock::now();
  run();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The best seconds of `run` over `repetitions` timed calls, by the host clock, one untimed call
// first (threads started, pages touched, primitives created). With `comm`, every timed call starts
// at its barrier (collective: every rank calls it with the same repetitions).
template <class Run>
double best_host_seconds(int repetitions, Run run, Communicator* comm = nullptr) {
  run();
  double best = 1e30;
  for (int r = 0; r < repetitions; ++r) {
    if (comm) comm->barrier();
    best = std::min(best, host_seconds(run));
  }
  return best;
}

// A stream of its own for a benchmark's kernels; destroyed whatever throws.
struct OwnedStream {
  cudaStream_t stream = kernels::cuda_stream_create();
  OwnedStream() = default;
  OwnedStream(const OwnedStream&) = delete;
  OwnedStream& operator=(const OwnedStream&) = delete;
  ~OwnedStream() { kernels::cuda_stream_destroy(stream); }
};

// The best seconds of one call of `run`, which enqueues work on `stream`: each repetition times
// `launches` calls between two CUDA events (one product of a few GFLOP takes microseconds on a
// large GPU, near the events' resolution), one untimed call and a synchronisation first (the
// library picks and loads its kernel, the clocks ramp up). With `comm`, as best_host_seconds.
template <class Run>
double best_device_seconds(int repetitions, int launches, cudaStream_t stream, Run run,
                           Communicator* comm = nullptr) {
  struct Events {  // freed whatever throws
    cudaEvent_t start = kernels::cuda_timing_event_create();
    cudaEvent_t stop = kernels::cuda_timing_event_create();
    ~Events() {
      kernels::cuda_event_destroy(stop);
      kernels::cuda_event_destroy(start);
    }
  } e;
  run();
  kernels::cuda_stream_synchronize(stream);
  double best = 1e30;
  for (int r = 0; r < repetitions; ++r) {
    if (comm) comm->barrier();
    kernels::cuda_event_record(e.start, stream);
    for (int i = 0; i < launches; ++i) run();
    kernels::cuda_event_record(e.stop, stream);
    kernels::cuda_event_synchronize(e.stop);
    best = std::min(best, 1e-3 * kernels::cuda_event_elapsed_ms(e.start, e.stop) / launches);
  }
  return best;
}

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
// oneDNN's matmul on bf16 operands, C in fp32 (gemm_bf16_onednn), on the rank's threads: FLOP/s
// as above. Throws where oneDNN has no bf16 matmul for this CPU.
double host_bf16_gemm_rate(Communicator& comm, int n);

}  // namespace lockstep::bench
