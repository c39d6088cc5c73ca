// BLAS (and oneDNN) threads per rank. Ranks on one host share its cores, so by default each rank's
// OpenBLAS gets cores / local ranks threads (at least 1); where the launcher bound the rank to
// fewer cores than the host has, the rank's own affinity set is its share. OpenBLAS is reached
// through weak symbols, so another BLAS links too and is simply left alone. Call from the main
// thread before the first BLAS call. No collective calls: each rank reads its own affinity and the
// launcher's counts.
#pragma once

#include <string>

#include "runtime/process/bootstrap.h"

namespace lockstep {

// Cores this process may run on (its affinity mask), or the host's count when unknown.
int usable_cores();
// At most OMP_THREAD_LIMIT, where one is set.
int default_blas_threads(const World& world);
// Why `threads` (a --threads value) cannot be used here, or "" when it can: more threads than
// OMP_THREAD_LIMIT lets OpenMP give this process (oneDNN would get a smaller team than it planned
// for and compute wrong results: kernels/onednn/onednn.h).
std::string blas_threads_problem(int threads);
// A warning where `threads` per rank on this host is more than its cores (or than the rank's own
// binding, where the launcher bound it to fewer): the threads take turns at every parallel region,
// and the work is slower than with the default. "" when they fit, or when `threads` is no more
// than default_blas_threads (more ranks than cores is the launcher's choice).
std::string blas_threads_oversubscribed(int threads, const World& world);
// Sets the BLAS thread count, and oneDNN's for calls from this thread (kernels/onednn/onednn.h);
// false when the BLAS offers no such control. Throws UsageError where blas_threads_problem says.
bool set_blas_threads(int threads);
// The BLAS's current thread count, or -1 when it cannot say.
int blas_threads();

}  // namespace lockstep
