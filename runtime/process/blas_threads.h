// BLAS (and oneDNN) threads per rank. Ranks on one host share its cores, so by default each rank's
// OpenBLAS gets cores / local ranks threads (at least 1); where the launcher bound the rank to
// fewer cores than the host has, the rank's own affinity set is its share. OpenBLAS is reached
// through weak symbols, so another BLAS links too and is simply left alone. Call from the main
// thread before the first BLAS call. No collective calls: each rank reads its own affinity and the
// launcher's counts.
#pragma once

#include "runtime/process/bootstrap.h"

namespace lockstep {

// Cores this process may run on (its affinity mask), or the host's count when unknown.
int usable_cores();
int default_blas_threads(const World& world);
// Sets the BLAS thread count, and oneDNN's for calls from this thread (kernels/onednn/onednn.h);
// false when the BLAS offers no such control.
bool set_blas_threads(int threads);
// The BLAS's current thread count, or -1 when it cannot say.
int blas_threads();

}  // namespace lockstep
