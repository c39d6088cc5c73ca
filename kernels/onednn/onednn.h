// oneDNN on the CPU: whether this build has it, and its thread count. The oneDNN twins of the CPU
// kernels (conv2d_*_onednn in conv2d.h, gemm_onednn in gemm.h, dense_*_onednn in dense.h) keep
// the contracts of their OpenBLAS siblings (*_cpu), which stay in every build as the fallback and
// as the oracle the tests compare against. In a build without oneDNN (LOCKSTEP_ONEDNN=OFF, or
// libdnnl-dev missing) onednn/stub.cpp stands in: onednn_built() is false and the twins throw, so
// callers carry no #ifdef.
//
// Primitives: each *_onednn function keeps the primitives it creates for a shape in a cache of
// the calling thread (thread_local), with the buffers they need (reordered operands, scratchpad),
// and reuses them on every later call with that shape: a training step creates nothing after its
// first step. A cache lives as long as its thread; it holds a few entries per layer shape and
// batch size. Calls from several threads are safe (each thread has its own primitives and stream).
// No collective calls.
#pragma once

namespace lockstep::kernels {

bool onednn_built();
// Threads oneDNN uses for calls from this thread (its CPU runtime is OpenMP here, so this sets
// the calling thread's OpenMP thread count, at most onednn_thread_limit(), and turns OpenMP's
// dynamic adjustment off for it). oneDNN plans a primitive's work for the team it asks OpenMP for
// and assumes it gets that team: a smaller one (OMP_DYNAMIC=true on a loaded machine, or a count
// above OMP_THREAD_LIMIT) made oneDNN 2.6 compute wrong products and convolutions, or hang. Every
// thread's first oneDNN call does the same for its default count. A no-op without oneDNN.
void onednn_set_threads(int threads);
// The most threads OpenMP gives this process (OMP_THREAD_LIMIT; unlimited: INT_MAX, and INT_MAX
// without oneDNN).
int onednn_thread_limit();
// "oneDNN 2.6.3 (OpenMP, AVX2)", or "none" without oneDNN: the version and the instruction set
// its kernels use on this machine (lockstep-bench train prints it).
const char* onednn_description();
// Whether oneDNN runs AVX-512 kernels here (any avx512_core flavour); false without oneDNN.
bool onednn_avx512();

}  // namespace lockstep::kernels
