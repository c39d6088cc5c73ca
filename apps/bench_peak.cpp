#include "apps/bench_peak.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#include "kernels/cast.h"
#include "kernels/cuda_memory.h"
#include "kernels/gemm.h"
#include "runtime/buffer.h"

namespace lockstep::bench {

namespace {

constexpr int kRepetitions = 3;

double flops(int n) { return 2.0 * n * static_cast<double>(n) * n; }

// Owns a stream and two timing events; frees them whatever throws.
struct TimedStream {
  cudaStream_t stream = kernels::cuda_stream_create();
  cudaEvent_t start = kernels::cuda_timing_event_create();
  cudaEvent_t stop = kernels::cuda_timing_event_create();
  ~TimedStream() {
    kernels::cuda_event_destroy(stop);
    kernels::cuda_event_destroy(start);
    kernels::cuda_stream_destroy(stream);
  }
};

}  // namespace

double host_gemm_rate(Communicator& comm, int n) {
  std::vector<float> a(static_cast<size_t>(n) * n, 0.5f), b(a.size(), 0.25f), c(a.size());
  kernels::GemmShape s;
  s.m = s.n = s.k = n;
  kernels::gemm_cpu(s, a.data(), b.data(), c.data());  // warm-up: threads started, pages touched
  double best = 1e30;
  for (int rep = 0; rep < kRepetitions; ++rep) {
    comm.barrier();
    auto t0 = std::chrono::steady_clock::now();
    kernels::gemm_cpu(s, a.data(), b.data(), c.data());
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return flops(n) / best;
}

double device_gemm_rate(Communicator& comm, int n, Precision precision) {
  // Several products per timed interval: one bf16 product of a few GFLOP takes microseconds on a
  // large GPU, near the events' resolution.
  constexpr int kProducts = 8;
  const size_t count = static_cast<size_t>(n) * n;
  Buffer<float> a(DeviceKind::cuda, count), b(DeviceKind::cuda, count), c(DeviceKind::cuda, count);
  // Values that neither overflow nor vanish; cuBLAS's speed does not depend on them.
  const std::vector<float> host(count, 0.5f);
  a.write(host.data(), 0, count);
  b.write(host.data(), 0, count);
  const bool bf16 = precision == Precision::bf16;
  Buffer<uint16_t> a16(DeviceKind::cuda, bf16 ? count : 0), b16(DeviceKind::cuda, bf16 ? count : 0);
  TimedStream t;
  if (bf16) {
    kernels::cast_f32_to_bf16_cuda(a.data(), a16.data(), count, t.stream);
    kernels::cast_f32_to_bf16_cuda(b.data(), b16.data(), count, t.stream);
  }
  kernels::GemmShape s;
  s.m = s.n = s.k = n;
  auto product = [&] {
    if (bf16)
      kernels::gemm_bf16_cuda(s, a16.data(), b16.data(), c.data(), t.stream);
    else
      kernels::gemm_cuda(s, a.data(), b.data(), c.data(), t.stream);
  };
  product();  // warm-up: cuBLAS picks and loads its kernel, the clocks ramp up
  kernels::cuda_stream_synchronize(t.stream);
  double best = 1e30;
  for (int rep = 0; rep < kRepetitions; ++rep) {
    comm.barrier();
    kernels::cuda_event_record(t.start, t.stream);
    for (int i = 0; i < kProducts; ++i) product();
    kernels::cuda_event_record(t.stop, t.stream);
    kernels::cuda_event_synchronize(t.stop);
    best = std::min(best, 1e-3 * kernels::cuda_event_elapsed_ms(t.start, t.stop) / kProducts);
  }
  return flops(n) / best;
}

}  // namespace lockstep::bench
