// The per-process state of a Lockstep job, in one plain struct passed explicitly (no globals):
// where the process sits (World), which device it computes on, and its communicator. Created by
// make_context() after MpiSession; owned by main(); used from the main thread.
#pragma once

#include <memory>
#include <string>

#include "runtime/bootstrap.h"
#include "runtime/communicator.h"
#include "runtime/device_kind.h"

namespace lockstep {

struct Context {
  World world;
  DeviceKind device = DeviceKind::cpu;
  int device_index = -1;       // CUDA ordinal when device == cuda
  std::unique_ptr<Communicator> comm;
  void* compute_stream = nullptr;  // cudaStream_t of the CUDA build; null on CPU
};

struct ContextOptions {
  std::string device = "cpu";  // cpu | cuda | auto
  std::string comm = "auto";   // auto (nccl on cuda, mpi on cpu) | mpi | nccl
  Millis timeout = kDefaultCollectiveTimeout;
};

// Picks the device (device.h rules), then builds the communicator. Collective: all ranks call it.
Context make_context(const World& world, const ContextOptions& options);

}  // namespace lockstep
