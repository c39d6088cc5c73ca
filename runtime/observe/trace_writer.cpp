#include "runtime/observe/trace_writer.h"

#include <cstdint>
#include <cstdio>
#include <fstream>

#include "kernels/cuda/memory.h"
#include "runtime/base/communicator.h"
#include "runtime/base/error.h"
#include "runtime/observe/trace.h"

namespace lockstep {

namespace {

// Runs `collective` on one host word. A communicator that takes device buffers only (NCCL, or MPI
// staging device buffers) gets a device copy of it, so write_trace works on the communicator the
// training ran on.
template <class Collective>
void on_word(Communicator& comm, int32_t* word, Collective&& collective) {
  if (!comm.device_buffers()) {
    collective(word);
    return;
  }
  void* device = kernels::cuda_alloc(sizeof *word);
  try {
    kernels::cuda_copy_to_device(device, word, sizeof *word);
    collective(static_cast<int32_t*>(device));
    kernels::cuda_copy_to_host(word, device, sizeof *word);
  } catch (...) {
    kernels::cuda_free(device);
    throw;
  }
  kernels::cuda_free(device);
}

}  // namespace

void start_tracing(Communicator& comm) {
  comm.barrier();
  start_recording(comm.rank());
}

void write_trace(Communicator& comm, const std::string& path) {
  flush_trace();
  stop_recording();
  const std::string part = path + ".rank" + std::to_string(comm.rank());
  int32_t ok = 1;
  {
    std::ofstream out(part, std::ios::binary | std::ios::trunc);
    out << trace_events_json();
    ok = out.good() ? 1 : 0;
  }
  on_word(comm, &ok, [&](int32_t* w) { comm.all_reduce_inplace(w, 1, ReduceOp::min); });
  if (!ok)
    throw UsageError("--trace " + path + ": cannot write the per-rank part files next to it");
  std::string problem;
  if (comm.rank() == 0) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
    for (int r = 0; r < comm.size() && problem.empty(); ++r) {
      const std::string name = path + ".rank" + std::to_string(r);
      std::ifstream in(name, std::ios::binary);
      if (!in) {
        problem = "--trace " + path + ": rank " + std::to_string(r) + "'s part " + name +
                  " is not visible to rank 0 (the ranks need a shared folder)";
        break;
      }
      if (r > 0) out << ",\n";
      out << in.rdbuf();
      in.close();
      std::remove(name.c_str());
    }
    out << "\n]}\n";
    if (problem.empty() && !out.good())
      problem = "--trace " + path + ": cannot write the merged trace";
  }
  // Rank 0's verdict reaches every rank, so all leave together.
  int32_t merged = problem.empty() ? 1 : 0;
  on_word(comm, &merged, [&](int32_t* w) { comm.broadcast(w, 1, DType::i32, 0); });
  if (!merged)
    throw UsageError(comm.rank() == 0 ? problem
                                      : "--trace " + path + ": rank 0 could not merge the trace");
}

}  // namespace lockstep
