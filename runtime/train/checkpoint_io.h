// The HDF5 encoding of a CheckpointState (internal to checkpoint.cpp and its tests).
//
// Layout, written with the HDF5 1.10 file format (checksummed metadata):
//   /                  attributes format="lockstep-checkpoint", format_version, model_spec, config,
//                      world_size, epoch, step_in_epoch, global_step, seed
//   /rng               uint64 (n)
//   /params/<name>     float32 with the tensor's shape, one per parameter
//   /optimizer/<name>  float32, one per optimizer buffer
//   /scalars           one float64 attribute per named scalar
// /params and /optimizer carry an attribute "names" (the tensor names in order, one per line), and
// every dataset an attribute "crc32" of its values, so a flipped bit in raw data (which HDF5 does
// not checksum) is found too.
//
// Thread-safety: both functions hold the process-wide HDF5 lock (hdf5_util.h) while they run.
// No collective calls.
#pragma once

#include <string>

#include "runtime/train/checkpoint.h"

namespace lockstep::detail {

// Writes `state` to `path` (created or truncated), flushed and closed. Throws Error on failure.
void write_checkpoint_h5(const std::string& path, const CheckpointState& state);

// Reads and checks a file written by write_checkpoint_h5. Throws UsageError naming `path` and what
// is wrong with it. header_only: the attributes alone (spec, config, position, seed), no tensors.
CheckpointState read_checkpoint_h5(const std::string& path, bool header_only = false);

}  // namespace lockstep::detail
