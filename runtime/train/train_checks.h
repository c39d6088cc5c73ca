// What the trainer checks of the data against its configuration before it builds anything, so
// that a mismatch is one UsageError naming the option or the file, never a crash or a surprise
// later. Both run on every rank with the same inputs, so every rank reaches the same verdict.
// Not thread-safe: one thread checks a TrainConfig. No collective calls.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/data/dataset.h"

namespace lockstep {

struct TrainConfig;

// Opens and validates the training and test splits (dataset.h). Reads float targets by the label
// rule for c.loss (cross-entropy: labels; mse: values; auto: the file decides), resolves
// LossKind::automatic to cross-entropy (class labels) or mse (values), and refuses --loss mse on
// integer labels and splits whose samples or targets differ in kind or shape. Under --on-nan skip
// the training split reads non-finite rows as they are (DatasetSpec::allow_non_finite: the step
// guard skips their steps). Returns the training split.
DatasetInfo inspect_training_data(TrainConfig& c);

// The test split's spec: the training split's file and names, --test-group, and non-finite rows
// always refused (an evaluation cannot skip them).
DatasetSpec test_split_spec(const TrainConfig& c);

// The split's sample shape as the model's input shape (SampleShape), refusing a dimension that
// does not fit an int.
std::vector<int> sample_shape_of(const DatasetInfo& info);

// The memory this process may still use, in bytes: MemAvailable in /proc/meminfo, or less where
// the process's memory cgroup (a Slurm job's, a container's) leaves less below its limit; 0 when
// unknown.
uint64_t available_host_memory();

// Refuses a global batch larger than the training split, and one whose buffers on a rank
// (batches in flight, activations and their gradients, convolution workspace, at `micro_rows`
// rows per micro-batch; the `held_bytes` of splits the loaders will hold in memory), times the
// c.host_ranks ranks that share this host, would not fit in `host_memory`, before any of them
// is allocated. The message names --global-batch and the sizes.
void check_batch_fits(const TrainConfig& c, const DatasetInfo& info, int outputs,
                      int64_t micro_rows, uint64_t held_bytes = 0,
                      uint64_t host_memory = available_host_memory());

}  // namespace lockstep
