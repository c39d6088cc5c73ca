// Checkpoints: the complete state of a training run in one HDF5 file, enough to continue it
// exactly.
//
// A CheckpointState is plain data: where the run is (epoch, step within the epoch, global step),
// what makes its future deterministic (seed, RNG words; the shuffle order is a function of seed and
// epoch), what it trains (model spec, parameters by layer name), the optimizer's buffers by name,
// named scalars (e.g. the optimizer's step count), the configuration text and the world size it was
// written at. Parameters are identical on every rank (DESIGN.md decision 7), so rank 0 alone saves;
// every rank loads.
//
// Files are "<dir>/ckpt-<global step, 9 digits>.h5". A save writes "<dir>/.ckpt-....h5.tmp",
// flushes and fsyncs it, renames it over the final name and fsyncs the folder: a crash at any
// moment leaves either the previous set of checkpoints or the new one, never a damaged newest file.
// The last `keep` checkpoints survive each save.
//
// Loading validates everything and throws UsageError naming the file and what is wrong: not a
// Lockstep checkpoint, unknown format version, truncated or corrupt (metadata checksums and a CRC32
// per dataset), a missing dataset or attribute; check_compatible adds: another model spec, a
// parameter of another shape, a missing optimizer buffer. Nothing in a file can crash the reader.
//
// Thread-safety: the functions take the process-wide HDF5 lock; call them from one thread at a
// time. No collective calls: rank 0 saves, each rank loads alone (train_checkpoint.h agrees).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace lockstep {

constexpr int kCheckpointFormatVersion = 1;

struct NamedTensor {
  std::string name;            // e.g. "dense0.weight"; '/' is allowed and makes subgroups
  std::vector<int64_t> shape;  // empty: a scalar
  std::vector<float> data;     // product(shape) values
};

struct CheckpointState {
  int format_version = kCheckpointFormatVersion;
  std::string model_spec;     // the model as the user named it, e.g. "mlp:64,64"
  std::string config;         // the run's options, one "key=value" per line, for the record,
                              // and what its model was planned for (input_shape, outputs per
                              // position, positions; absent in checkpoints before 2026-11-30)
  int world_size = 1;         // P at which it was written
  int epoch = 0;              // the epoch to continue in
  int64_t step_in_epoch = 0;  // steps of `epoch` already applied
  int64_t global_step = 0;    // steps applied since the start of training
  uint64_t seed = 0;
  std::vector<uint64_t> rng_state;  // any generator words the run needs to continue
  std::vector<NamedTensor> params;
  std::vector<NamedTensor> optimizer;  // e.g. "m/dense0.weight"
  std::map<std::string, double> scalars;
};

// What a model expects of a checkpoint: its spec and its parameters' and optimizer buffers' names
// and shapes (data unused).
struct CheckpointExpectation {
  std::string model_spec;
  std::vector<NamedTensor> params;
  std::vector<NamedTensor> optimizer;
  std::vector<std::string> scalars;
};

// A checkpoint's record of its run's options (CheckpointState::config, "key=value" lines) as a map.
std::map<std::string, std::string> config_record_values(const std::string& config);

// The tensor called `name`, or null.
const NamedTensor* find_tensor(const std::vector<NamedTensor>& tensors, const std::string& name);

// "<dir>/ckpt-000000123.h5" for global step 123.
std::string checkpoint_file_name(const std::string& dir, int64_t global_step);

// Writes the state atomically (see above), creating `dir` if needed, then deletes all but the
// newest `keep` checkpoints (keep <= 0 keeps all) and any temporary file a crashed save left.
// Returns the path written. Throws Error when the file system refuses (disk full, no permission):
// the temporary file is removed, and the message names the file, the cause ("no space left on
// device") and the newest good checkpoint.
// Called by one rank only. Refuses (Error) to write a state with a non-finite parameter.
std::string save_checkpoint(const std::string& dir, const CheckpointState& state, int keep);

// The checkpoints in `dir`, oldest first (by global step in the name).
std::vector<std::string> list_checkpoints(const std::string& dir);

// `path` itself when it is a file; the newest checkpoint when it is a folder. Throws UsageError if
// it does not exist or the folder holds no checkpoint.
std::string resolve_checkpoint(const std::string& path);

// Reads and validates a checkpoint file (or the newest in a folder). Throws UsageError as above.
CheckpointState load_checkpoint(const std::string& path);
// Its attributes alone (model spec, config, position, seed; params, optimizer and scalars empty):
// what the run that wrote it was, without reading its tensors.
CheckpointState load_checkpoint_header(const std::string& path);

// Throws UsageError naming `path` when `state` does not fit the model: another spec, a parameter or
// optimizer buffer that is missing or has another shape, a missing scalar, extra parameters.
void check_compatible(const CheckpointState& state, const CheckpointExpectation& expected,
                      const std::string& path);

// Test hook: when the environment variable LOCKSTEP_TEST_CRASH_IN_SAVE holds a global step,
// save_checkpoint of that step kills its own process (SIGKILL) right after writing and syncing the
// temporary file, before the rename, as a power cut or a kill -9 at that moment would.
constexpr const char* kCrashInSaveEnv = "LOCKSTEP_TEST_CRASH_IN_SAVE";
// Test hook: the same, but the process stops itself (SIGSTOP) there, as a rank stalled in a save
// would: its peers must give up at the checkpoint deadline (step_guard.h).
constexpr const char* kStopInSaveEnv = "LOCKSTEP_TEST_STOP_IN_SAVE";

}  // namespace lockstep
