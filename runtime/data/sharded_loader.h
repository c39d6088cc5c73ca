// Per-rank loader of a dataset split (DESIGN.md decisions 5 and 6).
//
// Each epoch has one global permutation of the rows, from (seed, epoch); with shuffle off, the file
// order. Step k takes perm[k*B, (k+1)*B) (B: rows_per_step); rank r of P takes positions
// [r*B/P, (r+1)*B/P) of
// it. The sequence of global batches is therefore the same at every P. A last, partial global batch
// is kept and padded with mask 0 (remainder mask) or dropped (remainder drop); every rank runs the
// same number of steps either way, so none leaves the others waiting in a collective.
//
// A rank reads only its own rows, grouped into contiguous runs, on a background thread that stays
// `prefetch` batches ahead; or, for a split small enough (LoaderOptions::in_memory_bytes), the
// whole split once, and its rows from memory after that. Inputs come out as float32 normalised with
// the file's attributes, labels as int32 (a token split's: T per row, dataset.h). Owned and used by
// one thread (the prefetch thread is internal).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/base/communicator.h"
#include "runtime/data/dataset.h"

namespace lockstep {

struct LoaderOptions {
  // Rows of the split each step takes over all ranks, padding included: a trainer's micro-batch
  // of every rank (its global batch / --grad-accum). Must be positive, at least the world size P
  // and divide by it; each rank takes rows_per_step / P of them.
  int64_t rows_per_step = 0;
  uint64_t seed = 0;
  bool shuffle = true;
  bool drop_remainder = false;
  int prefetch = 2;                                     // batches read ahead
  int64_t chunk_cache_bytes = kDefaultChunkCacheBytes;  // see dataset.h; 0: HDF5's 1 MiB
  // A split of at most this many bytes as stored is read whole into memory at the first batch
  // (DatasetReader); 0: each batch reads its own rows from the file.
  int64_t in_memory_bytes = 0;
};

struct Batch {
  int epoch = 0;
  int64_t step = 0;             // step within the epoch
  int64_t rows = 0;             // B/P: rows in this rank's slice, padding included
  int64_t valid = 0;            // real rows in this rank's slice
  int64_t global_valid = 0;     // real rows in the whole global batch (same on every rank)
  std::vector<float> x;         // rows * sample_size, padding rows zero
  std::vector<int32_t> labels;  // classification: rows * positions (padding 0)
  std::vector<float> targets;   // regression: rows * target_dim
  std::vector<float> mask;      // rows: 1 real, 0 padding (one per row, for every position)
  std::vector<int64_t> index;   // rows: global row number in the file, -1 for padding
  double wait_seconds = 0;      // time next() waited for this batch
};

class ShardedLoader {
 public:
  // Validates (throws UsageError, in the loader's terms: rows per step): B > 0, B divisible by P,
  // B >= P, dataset non-empty. A trainer checks its --global-batch and --grad-accum first
  // (validate(TrainConfig)), so its users see these only from other programs.
  ShardedLoader(const DatasetSpec& spec, const LoaderOptions& options, int rank, int size);
  ~ShardedLoader();
  ShardedLoader(const ShardedLoader&) = delete;
  ShardedLoader& operator=(const ShardedLoader&) = delete;

  const DatasetInfo& info() const;
  int64_t steps_per_epoch() const;

  // Positions the loader at (epoch, first_step) and starts prefetching.
  void start_epoch(int epoch, int64_t first_step = 0);
  // The next batch of the current epoch; false when the epoch is over.
  bool next(Batch& out);

  // The split's DatasetReader::fingerprint; before start_epoch (the prefetch thread reads after).
  uint64_t fingerprint();

  uint64_t bytes_read() const;  // bytes this rank has read from the file so far
  uint64_t held_bytes() const;  // the split's stored bytes when held in memory, else 0
  double wait_seconds_total() const;

  // Global row order of an epoch (exposed for tests and resume checks).
  static std::vector<int64_t> permutation(int64_t rows, uint64_t seed, int epoch, bool shuffle);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Collective over `comm` (host buffers): constructs the loader for comm's rank and size on every
// rank; a UsageError on any rank (bad file, bad batch size) is thrown on every rank with the first
// failing rank's message (agree_or_throw), so all ranks leave together and rank 0 can report it
// once.
std::unique_ptr<ShardedLoader> open_sharded_loader(const DatasetSpec& spec,
                                                   const LoaderOptions& options,
                                                   Communicator& comm);

// Collective over `comm` (host buffers), before the loaders' first epoch: throws AgreedUsageError
// on every rank where a rank's split differs from rank 0's (rows, sample shape, types, targets,
// normalisation, or the values of its first, middle or last row: ShardedLoader::fingerprint),
// naming both. Ranks that read other data would train a model on a mix of datasets; other row
// counts give them other step counts, which ends in a failed collective instead of a message.
// The case: a node's copy of the file (staged to local disk) stale or incomplete.
void require_same_split(Communicator& comm, ShardedLoader& loader);
// The same for a split read without a loader (lockstep-predict's).
void require_same_split(Communicator& comm, DatasetReader& reader);

// The nearest valid global batch sizes around `batch` for `size` ranks, for error messages:
// "try 126 or 128".
std::string suggest_batch_sizes(int64_t batch, int size);

// Why `rows` rows a step cannot be shared out among `size` ranks, "" when they can (positive, at
// least one a rank, a multiple of the ranks), naming them `what`: "rows per step" (the loader's
// own refusal) or the option a program takes them from ("--global-batch").
std::string split_problem(int64_t rows, int size, const std::string& what);

}  // namespace lockstep
