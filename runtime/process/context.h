// The per-process state of a Lockstep job, in one plain struct passed explicitly (no globals):
// where the process sits (World), which device it computes on, and its two communicators: `host`
// for host values (agreement, loss sums, flags, checksums, traces) and `grads` for the gradient
// buckets. On the CPU they are the same object; on CUDA `grads` takes device buffers (NCCL, or MPI
// staging them) while `host` stays an MPI communicator over host memory. Created by make_context()
// after MpiSession; owned by main(); used from the main thread.
// Collective: every rank calls make_context() once, at the same point (it bootstraps NCCL
// over `host`).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "runtime/base/communicator.h"
#include "runtime/base/device_kind.h"
#include "runtime/process/bootstrap.h"

namespace lockstep {

struct Context {
  World world;
  DeviceKind device = DeviceKind::cpu;
  int device_index = -1;          // CUDA ordinal when device == cuda
  Communicator* host = nullptr;   // the world over host memory; not owned (MpiSession's)
  Communicator* grads = nullptr;  // == host on the CPU; else own_grads
  std::unique_ptr<Communicator> own_grads;
};

// How many CUDA devices this rank sees; sets *reason when none.
using GpuCounter = std::function<int(std::string* reason)>;

struct ContextOptions {
  std::string device = "cpu";  // cpu | cuda | auto
  std::string comm = "auto";   // auto (nccl on cuda, mpi on cpu) | mpi | nccl
  Millis timeout = kDefaultCollectiveTimeout;
  // One-off start-up work (the device agreement, NCCL's id and initialisation) and what follows
  // until Trainer::set_deadlines runs under the larger of the two; 0: `timeout`.
  Millis startup_timeout{0};
  GpuCounter gpu_count;  // test seam; empty: the CUDA runtime (cuda_device_count)
  std::function<std::string(int index)> gpu_uuid;  // test seam; empty: cuda_device_uuid
};

// Picks the device (device.h rules), agreeing on it over `host` (a rank left on the CPU by
// --device auto while others chose GPUs is an agreed UsageError naming it and its CUDA reason),
// then builds the gradient communicator (NCCL's unique id travels over `host`). `host`: every rank
// of `world` over host memory (MpiSession::world_comm()); it must outlive the Context, and takes
// options.timeout too. Collective: all ranks call it.
Context make_context(const World& world, Communicator& host, const ContextOptions& options);

}  // namespace lockstep
