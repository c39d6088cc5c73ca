#include "apps/bench_peak.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/cast.h"
#include "kernels/conv/conv2d.h"
#include "kernels/conv/winograd.h"
#include "kernels/cuda/memory.h"
#include "kernels/gemm.h"
#include "kernels/onednn/onednn.h"
#include "runtime/base/buffer.h"

namespace lockstep::bench {

namespace {

constexpr int kRepetitions = 3;
// The convolution's forward takes about a millisecond: best of 3 was at the mercy of one slow
// stretch of a shared VM (a 2-core Zen 5's peak once came out at 645 GFLOP/s against 800-880 in
// five other runs, and a step at 103% of it), so it is timed 20 times.
constexpr int kConvRepetitions = 20;

double flops(int n) { return 2.0 * n * static_cast<double>(n) * n; }

// The best time of `run` over the repetitions, all ranks starting each one together.
template <class Run>
double best_seconds(Communicator& comm, Run run, int repetitions = kRepetitions) {
  return best_host_seconds(repetitions, run, &comm);
}

// The CNN's second convolution (lockstep-train --model cnn) at a per-rank batch of 64: where its
// training step spends most of its FLOPs. `forward(s, x, w, b, y)` runs it: oneDNN on NHWC
// activations (the direct algorithm), oneDNN with them in 16-channel blocks, where it chooses the
// algorithm (Winograd on AVX-512), and Lockstep's Winograd kernels (kernels/conv/winograd.h,
// blocked, as the CNN runs them on AVX-512): the Winograd rates count the direct algorithm's FLOPs,
// as the training step's does.
template <class Forward>
double host_conv_rate(Communicator& comm, Forward forward) {
  kernels::Conv2dShape s;
  s.n = 64, s.h = 14, s.w = 14, s.c_in = 32, s.c_out = 64;
  const size_t xs = static_cast<size_t>(s.n) * s.h * s.w * s.c_in;
  const size_t ws = static_cast<size_t>(s.kh) * s.kw * s.c_in * s.c_out;
  const size_t ys = static_cast<size_t>(s.n) * s.out_h() * s.out_w() * s.c_out;
  std::vector<float> x(xs, 0.5f), w(ws, 0.25f), b(s.c_out, 0.1f), y(ys);
  const double f = 2.0 * static_cast<double>(ys) * s.kh * s.kw * s.c_in;
  return f /
         best_seconds(
             comm, [&] { forward(s, x.data(), w.data(), b.data(), y.data()); }, kConvRepetitions);
}

}  // namespace

std::vector<KernelRate> host_kernel_rates(Communicator& comm, int n, bool convolutions) {
  std::vector<float> a(static_cast<size_t>(n) * n, 0.5f), b(a.size(), 0.25f), c(a.size());
  kernels::GemmShape s;
  s.m = s.n = s.k = n;
  const std::string cube = std::to_string(n) + "^3";
  std::vector<KernelRate> rates;
  // OpenBLAS last: its pthreads spin for a while after a product (an OpenMP kernel timed then
  // shares the cores with them: the Winograd rate at 2 threads came out at a fifth of itself).
  const auto openblas_last = [&] {
    rates.push_back({"OpenBLAS sgemm " + cube, flops(n) / best_seconds(comm, [&] {
                                                 kernels::gemm_cpu(s, a.data(), b.data(), c.data());
                                               })});
    return rates;
  };
  const std::string conv = "convolution 64x14x14x32->64 3x3";
  if (convolutions && kernels::winograd_fast())
    rates.push_back({"Lockstep Winograd " + conv + " blocked (counted as direct)",
                     host_conv_rate(comm, [](const kernels::Conv2dShape& cs, const float* x,
                                             const float* w, const float* b, float* y) {
                       kernels::winograd_forward_cpu(cs, x, w, b, y);
                     })});
  if (!kernels::onednn_built()) return openblas_last();
  rates.push_back({"oneDNN matmul " + cube, flops(n) / best_seconds(comm, [&] {
                                              kernels::gemm_onednn(s, a.data(), b.data(), c.data());
                                            })});
  if (convolutions)
    for (const bool blocked : {false, true})
      rates.push_back(
          {"oneDNN " + conv + (blocked ? " blocked (oneDNN's algorithm, counted as direct)" : ""),
           host_conv_rate(comm, [blocked](const kernels::Conv2dShape& cs, const float* x,
                                          const float* w, const float* b, float* y) {
             kernels::conv2d_forward_onednn(cs, x, w, b, y, {blocked, blocked});
           })});
  return openblas_last();
}

double host_bf16_gemm_rate(Communicator& comm, int n) {
  const size_t count = static_cast<size_t>(n) * n;
  const std::vector<float> half(count, 0.5f);
  std::vector<uint16_t> a(count), b(count);
  kernels::cast_f32_to_bf16_cpu(half.data(), a.data(), count);
  kernels::cast_f32_to_bf16_cpu(half.data(), b.data(), count);
  std::vector<float> c(count);
  kernels::GemmShape s;
  s.m = s.n = s.k = n;
  return flops(n) /
         best_seconds(comm, [&] { kernels::gemm_bf16_onednn(s, a.data(), b.data(), c.data()); });
}

double device_gemm_rate(Communicator& comm, int n, Precision precision) {
  constexpr int kProducts = 8;  // timed together
  const size_t count = static_cast<size_t>(n) * n;
  Buffer<float> a(DeviceKind::cuda, count), b(DeviceKind::cuda, count), c(DeviceKind::cuda, count);
  // Values that neither overflow nor vanish; cuBLAS's speed does not depend on them.
  const std::vector<float> host(count, 0.5f);
  a.write(host.data(), 0, count);
  b.write(host.data(), 0, count);
  const bool bf16 = precision == Precision::bf16;
  Buffer<uint16_t> a16(DeviceKind::cuda, bf16 ? count : 0), b16(DeviceKind::cuda, bf16 ? count : 0);
  OwnedStream owned;
  const cudaStream_t stream = owned.stream;
  if (bf16) {
    kernels::cast_f32_to_bf16_cuda(a.data(), a16.data(), count, stream);
    kernels::cast_f32_to_bf16_cuda(b.data(), b16.data(), count, stream);
  }
  kernels::GemmShape s;
  s.m = s.n = s.k = n;
  const double best = best_device_seconds(
      kRepetitions, kProducts, stream,
      [&] {
        if (bf16)
          kernels::gemm_bf16_cuda(s, a16.data(), b16.data(), c.data(), stream);
        else
          kernels::gemm_cuda(s, a.data(), b.data(), c.data(), stream);
      },
      &comm);
  return flops(n) / best;
}

}  // namespace lockstep::bench
