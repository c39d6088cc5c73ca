// Loops of the CPU kernels spread over the rank's threads (--threads) with OpenMP, in a build with
// oneDNN, whose OpenMP runtime (libgomp) the process has anyway; elsewhere they run serially.
// Only loops whose iterations write disjoint outputs and add nothing up across iterations use it,
// so a kernel's result is the same bits whatever the thread count. Internal to kernels/*.cpp.
// parallel_chunks(n, fn) calls fn(begin, end) over [0, n) in contiguous chunks of at least `grain`
// items (one per thread, statically): the chunk function can then be a vectorised, cloned loop.
// Thread-safe when fn is; no collective calls.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <type_traits>
#include <vector>

#if defined(_OPENMP)
#include <omp.h>
#define LS_PARALLEL_FOR _Pragma("omp parallel for schedule(static)")
#else
#define LS_PARALLEL_FOR
#endif

// A function compiled for AVX-512 alone: call it only where cpu_avx512f() is true.
#define LS_AVX512 __attribute__((target("avx512f")))
// A function compiled for AVX2 with FMA: call it only where cpu_avx2() is true.
#define LS_AVX2 __attribute__((target("avx2,fma")))
#define LS_ALWAYS_INLINE inline __attribute__((always_inline))
// A lambda given to widest_build (below): always inlined, so compiled into each build.
#define LS_BUILD_LAMBDA __attribute__((always_inline))

namespace lockstep::kernels {

// The widest vector ISA the loops dispatched at run time may take (process-wide, set at start-up
// from runtime/base/knobs.h's LOCKSTEP_CPU_ISA): native (default), avx2 (an AVX-512 machine runs
// the AVX2 builds, as an AVX2-only one would), or baseline (the baseline builds on any CPU; a test
// runs them so on an AVX-512 machine).
enum class CpuIsa { native, avx2, baseline };
inline std::atomic<CpuIsa>& cpu_isa_cap() {
  static std::atomic<CpuIsa> cap{CpuIsa::native};
  return cap;
}
inline void set_cpu_isa_cap(CpuIsa cap) { cpu_isa_cap() = cap; }

// Whether the loops dispatched on the CPU take their AVX-512 builds: the CPU has AVX-512F and the
// cap allows it.
inline bool cpu_avx512f() {
  static const bool has = __builtin_cpu_supports("avx512f");
  return has && cpu_isa_cap().load(std::memory_order_relaxed) == CpuIsa::native;
}
// Whether they may take AVX2 builds (with FMA): the CPU has both and the cap is not baseline.
inline bool cpu_avx2() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has && cpu_isa_cap().load(std::memory_order_relaxed) != CpuIsa::baseline;
}

namespace detail {
template <class Fn>
LS_AVX512 __attribute__((noinline)) void run_avx512(const Fn& fn) {
  fn(std::integral_constant<int, 16>{});
}
template <class Fn>
LS_AVX2 __attribute__((noinline)) void run_avx2(const Fn& fn) {
  fn(std::integral_constant<int, 8>{});
}
template <class Fn>
__attribute__((noinline)) void run_baseline(const Fn& fn) {
  fn(std::integral_constant<int, 4>{});
}
}  // namespace detail

// fn(w), a lambda marked LS_BUILD_LAMBDA, compiled three times over: for AVX-512 (w a
// std::integral_constant<int, 16>: the floats in a vector), for AVX2 with FMA (8) and for the
// baseline (4); called in the widest build the CPU and the cap allow. The loops in fn are
// vectorised for that build's registers, or written with vectors of w floats. AVX2 with FMA
// contracts products into sums as AVX-512 does: the loops here give the same bits in both
// (kernels_gpt_test's GeluBuilds; a 2-rank GPT run's checkpoint either way).
template <class Fn>
void widest_build(const Fn& fn) {
  if (cpu_avx512f())
    detail::run_avx512(fn);
  else if (cpu_avx2())
    detail::run_avx2(fn);
  else
    detail::run_baseline(fn);
}

// Per-thread scratch: at least `floats` floats in the calling thread's buffer `slot` (0-3), kept
// between calls, so a step allocates nothing once the buffers have grown. Valid until the same
// thread asks for the same slot again. Slots in use: 0, 1 the Winograd kernels (3 their fused
// pool's expanded gradient), 2 the flash attention.
inline float* thread_scratch(int slot, size_t floats) {
  thread_local std::vector<float> buffers[4];
  std::vector<float>& v = buffers[slot];
  if (v.size() < floats) v.resize(floats);
  return v.data();
}

// The chunks parallel_chunks(n, grain, ...) makes here and now: 1 where it runs on the calling
// thread alone (one thread, too little work, or already inside a parallel region such as a lane's).
inline size_t parallel_chunk_count(size_t n, size_t grain) {
#if defined(_OPENMP)
  if (omp_in_parallel()) return 1;
  const size_t threads = static_cast<size_t>(omp_get_max_threads());
  return std::max<size_t>(1, std::min(threads, n / std::max<size_t>(grain, 1)));
#else
  (void)n, (void)grain;
  return 1;
#endif
}
template <class Fn>
void parallel_chunks(size_t n, size_t grain, Fn&& fn) {
#if defined(_OPENMP)
  const size_t chunks = parallel_chunk_count(n, grain);
  if (chunks > 1) {
    const size_t per = (n + chunks - 1) / chunks;
#pragma omp parallel for schedule(static) num_threads(chunks)
    for (size_t c = 0; c < chunks; ++c) {
      const size_t begin = c * per, end = std::min(n, begin + per);
      if (begin < end) fn(begin, end);
    }
    return;
  }
#endif
  if (n > 0) fn(size_t{0}, n);
}

}  // namespace lockstep::kernels
