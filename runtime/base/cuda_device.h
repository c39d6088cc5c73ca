// The CUDA device of this process, below any choice of it: how many GPUs the process sees, making
// one current, and letting helper threads use it. process/device.h decides which GPU a rank takes
// (choose_device); this header is what lower wings (the MPI backend's staging) need. Twins:
// cuda_device.cu, cuda_device_stub.cpp (a build without CUDA sees no GPU).
// Thread-safe as the CUDA runtime is (the current device is per thread). No collective calls.
#pragma once

#include <string>

#include "runtime/base/device_kind.h"

namespace lockstep {

// Number of CUDA devices this process sees; 0 with `reason` set (the CUDA runtime's words, or
// "not built with CUDA") when none can be used.
int cuda_device_count(std::string* reason);

// The identity of CUDA device `index` as NVIDIA tools print it ("GPU-" and its UUID), the same
// whatever CUDA_VISIBLE_DEVICES numbers it as; "" where it cannot be read (a build without CUDA).
std::string cuda_device_uuid(int index);

struct DeviceChoice {
  DeviceKind kind = DeviceKind::cpu;
  int index = -1;
};

// Makes `choice` the current device of this process (cudaSetDevice), and lets its default memory
// pool keep up to 256 MiB of freed stream-ordered memory mapped across synchronisations instead of
// none; no-op on cpu.
void activate_device(const DeviceChoice& choice);

// CUDA's current device is per thread: a helper thread (the MPI progress thread staging device
// buffers) calls this before touching device memory, so it works on the GPU activate_device() chose
// rather than silently opening a context on GPU 0. No-op before any activate_device() and in a
// build without CUDA.
void use_active_device();

}  // namespace lockstep
