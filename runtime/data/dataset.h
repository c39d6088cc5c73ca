// A dataset split in an HDF5 file (DESIGN.md, data format): one group per split ("train", "test")
// holding the inputs and the targets.
//   classification: <group>/images (N, H, W, C) any integer or float type, <group>/labels (N,) any
//                   integer type
//   regression:     <group>/x (N, D) any integer or float type, <group>/y (N,) or (N, K) float
//   tokens:         <group>/tokens (N, T + 1) any integer type (lockstep-data text): a token
//                   split, a language model's data. Inputs are a row's first T tokens (the ids as
//                   exact floats, not normalised), labels its last T (position t's next token);
//                   T predictions per sample (DatasetInfo::positions), classes = vocab_size
//   attributes:     num_classes, norm_scale, norm_mean, norm_std, on the input dataset, else its
//                   group, else the file root (num_classes on the targets dataset first); a token
//                   split reads vocab_size (needed unless the tokens are uint8, then 256; every
//                   token must be below it) and seq_len (if present, T) instead
// A group holding `tokens` is a token split whatever else it holds; --x-name and --y-name then
// must be tokens or left out.
// The label rule: integer targets are class labels; float targets are class labels when the
// reader is asked for labels (--loss cross-entropy) or, left to decide (--loss auto), when the file
// declares num_classes; then every value must be a whole number in [0, num_classes), else the
// split is refused naming the value and --loss. Otherwise float targets are regression values.
// inspect_dataset opens the file read-only, checks it and describes it; every problem is a
// UsageError naming the file, the dataset and what is wrong.
// Thread-safe: it reads under the process-wide Hdf5Lock (hdf5_util.h). No collective calls:
// every rank inspects the file itself.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace lockstep {

// How float targets are read (integer targets are always class labels): see the label rule above.
enum class TargetKind { automatic, labels, values };

struct DatasetSpec {
  std::string path;
  std::string group = "train";
  std::string x_name;  // empty: "tokens" if present, else "images" if present, else "x"
  std::string y_name;  // empty: "labels" beside "images", "y" beside "x"; beside another x name,
                       // "labels" if the group holds it, else "y"
  TargetKind targets = TargetKind::automatic;
  // Read the inputs alone (lockstep-predict): the targets dataset is neither needed nor opened, so
  // a file of inputs without labels reads; DatasetInfo::has_targets is then false and the target
  // fields (classification, num_classes, target_dim) say nothing. A token split is unchanged (its
  // targets are its inputs shifted).
  bool inputs_only = false;
  // Read NaN and infinite inputs and targets as they are instead of refusing them: the training
  // split under --on-nan skip, whose step guard leaves out the steps they reach.
  bool allow_non_finite = false;
};

struct DatasetInfo {
  std::string path, group, x_name, y_name;
  int64_t rows = 0;
  std::vector<int64_t> sample_shape;  // x's dimensions after the first, e.g. {28, 28, 1} or {D}
  int64_t sample_size = 0;            // product of sample_shape
  bool classification = true;         // class labels vs regression values (the label rule)
  int num_classes = 0;                // classification: from the attribute, else max label + 1;
                                      // a token split: vocab_size
  int positions = 1;                  // predictions per sample: T for a token split, else 1
  int target_dim = 1;                 // regression: K (1 for a (N,) target)
  float norm_mean = 0.0f;             // x is converted to (x * norm_scale - norm_mean) / norm_std
  float norm_std = 1.0f;
  float norm_scale = 1.0f;     // 1/255 for uint8 images, 1 for float
  bool has_targets = true;     // false: DatasetSpec::inputs_only (not a token split)
  std::string x_type, y_type;  // file types in words, for messages and inspect
};

DatasetInfo inspect_dataset(const DatasetSpec& spec);

// A token split whose tokens are bytes (vocabulary 256, lockstep-data text): its per-token loss
// in nats is also reported in bits per byte (loss / ln 2).
inline bool byte_level_tokens(const DatasetInfo& info) {
  return info.positions > 1 && info.num_classes == 256;
}

// Checks that the samples of `info` fit a model whose input has shape `model_input` (e.g.
// {28, 28, 1}); a trailing channel of 1 on one side only is accepted ((28, 28) fits (28, 28, 1)).
// Throws UsageError naming the file, the dataset and both shapes.
void check_sample_shape(const DatasetInfo& info, const std::vector<int64_t>& model_input);

// HDF5 cache of decompressed chunks of the input dataset, per reader. Shuffled rows land in every
// chunk, so a chunk evicted too early is inflated again for each of its rows: a cache at least as
// large as the uncompressed inputs (Fashion-MNIST: 47 MB) inflates each chunk once per process.
constexpr int64_t kDefaultChunkCacheBytes = int64_t{64} << 20;

// A split whose datasets hold at most this many bytes as stored (Fashion-MNIST's training split:
// 47 MB) is read whole into memory once by the trainer's loaders (TrainConfig::data_in_memory_mb):
// rows then come from memory, tens of times faster than one HDF5 selection per run of rows.
constexpr int64_t kDefaultInMemoryBytes = int64_t{1} << 30;

// Reads chosen rows of one split, converted for training: inputs to float32 with the file's
// normalisation, labels to int32. Validates like inspect_dataset and keeps the file open
// (read-only). With in_memory_bytes > 0 and a split of at most that many bytes as stored, the
// first read takes the whole split into memory (one read per dataset) and later reads copy from
// there; otherwise each read takes only the rows asked for from the file. One thread at a time
// uses a reader (ShardedLoader's prefetch thread); each file read holds the process-wide Hdf5Lock.
class DatasetReader {
 public:
  explicit DatasetReader(const DatasetSpec& spec,
                         int64_t chunk_cache_bytes = kDefaultChunkCacheBytes,
                         int64_t in_memory_bytes = 0);
  ~DatasetReader();
  DatasetReader(const DatasetReader&) = delete;
  DatasetReader& operator=(const DatasetReader&) = delete;

  const DatasetInfo& info() const;

  // Reads rows ids[0, n) (any order, repeats allowed, each in [0, rows)) into x (n * sample_size
  // floats) and, for classification, labels (n * positions: a token split's T next tokens per
  // row) or, for regression, targets (n * target_dim); the other target pointer may be null (both,
  // without targets). The rows are sorted and read as runs of consecutive rows (one H5Dread per
  // run), so chunks are visited in file order and a chunk's rows follow each other through the
  // chunk cache. An input or regression target that is not finite as a float (NaN, an infinity,
  // a float64 beyond float32's range) throws UsageError naming the dataset, the row and the value's
  // place in it: such a row would make the loss, or a prediction, NaN (unless
  // DatasetSpec::allow_non_finite, which reads it as it is).
  void read_rows(const int64_t* ids, size_t n, float* x, int32_t* labels, float* targets);

  // A hash of the split's description (rows, shapes, types, targets, normalisation) and of the
  // stored bytes of its first, middle and last rows, read from the file (three rows, not the
  // whole split held in memory): two copies of a split tell apart by it. Not counted in
  // bytes_read. Same thread rule as read_rows.
  uint64_t fingerprint();

  // Bytes of the datasets (uncompressed, as stored) this reader has read so far.
  uint64_t bytes_read() const;
  // The split's bytes as stored (its datasets, uncompressed) when it is (or will be, at the first
  // read) held whole in memory; 0 when each read takes its rows from the file.
  uint64_t held_bytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lockstep
