// Where a computation runs: the host CPU or a CUDA device. Its own header so that buffers, layers
// and steps name a device without pulling in the bootstrap and the communicators (context.h).
// An enum only: thread-safe, no collective calls.
#pragma once

namespace lockstep {

enum class DeviceKind { cpu, cuda };

inline const char* device_kind_name(DeviceKind k) { return k == DeviceKind::cpu ? "cpu" : "cuda"; }

// Whether this binary was built with CUDA (LOCKSTEP_CUDA=ON), so that DeviceKind::cuda can be asked
// for at all; whether a GPU answers is cuda_device_count's question (device.h).
bool cuda_built();

}  // namespace lockstep
