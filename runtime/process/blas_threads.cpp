#include "runtime/process/blas_threads.h"

#include <sched.h>

#include <algorithm>
#include <thread>

#include "kernels/onednn/onednn.h"
#include "runtime/base/error.h"

// OpenBLAS's thread controls (declared in its cblas.h). Weak: null when another BLAS is linked.
extern "C" {
void openblas_set_num_threads(int num_threads) __attribute__((weak));
int openblas_get_num_threads(void) __attribute__((weak));
}

namespace lockstep {

namespace {
int host_cores() { return std::max(1u, std::thread::hardware_concurrency()); }
}  // namespace

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return host_cores();
}

int default_blas_threads(const World& world) {
  int mine = usable_cores();
  // A binding narrower than the host already is this rank's share of the cores.
  if (mine < host_cores()) return std::min(mine, kernels::onednn_thread_limit());
  return std::clamp(mine / std::max(1, world.local_size), 1, kernels::onednn_thread_limit());
}

std::string blas_threads_problem(int threads) {
  const int limit = kernels::onednn_thread_limit();
  if (threads <= limit) return "";
  return "--threads " + std::to_string(threads) +
         " is more than OMP_THREAD_LIMIT=" + std::to_string(limit) +
         " lets OpenMP run in this process (oneDNN would get " +
         "fewer threads than it planned its work for, and compute wrong results): use --threads " +
         std::to_string(limit) + " or fewer, or raise OMP_THREAD_LIMIT";
}

std::string blas_threads_oversubscribed(int threads, const World& world) {
  const int mine = usable_cores();
  const bool bound = mine < host_cores();
  const int ranks = bound ? 1 : std::max(1, world.local_size);
  // More ranks than cores is the launcher's doing; the default's one thread each adds nothing.
  const int share = default_blas_threads(world);
  if (threads <= share || static_cast<int64_t>(threads) * ranks <= mine) return "";
  std::string asked = "--threads " + std::to_string(threads);
  if (ranks > 1) asked += " x " + std::to_string(ranks) + " ranks on this host";
  const std::string cores =
      std::to_string(mine) + (bound ? " core(s) this rank is bound to" : " core(s) of this host");
  return asked + " is more threads than the " + cores +
         ": they take turns at every parallel region, and all of the work is slower; "
         "--threads 0 (the default) gives each rank " +
         std::to_string(share);
}

bool set_blas_threads(int threads) {
  if (std::string problem = blas_threads_problem(threads); !problem.empty())
    throw UsageError(problem);
  kernels::onednn_set_threads(threads);
  if (!openblas_set_num_threads) return false;
  openblas_set_num_threads(std::max(1, threads));
  return true;
}

int blas_threads() { return openblas_get_num_threads ? openblas_get_num_threads() : -1; }

}  // namespace lockstep
