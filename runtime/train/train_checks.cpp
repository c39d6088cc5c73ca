#include "runtime/train/train_checks.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <exception>
#include <fstream>
#include <string>
#include <utility>

#include "runtime/base/error.h"
#include "runtime/base/log.h"
#include "runtime/model/layer_registry.h"
#include "runtime/model/model_spec.h"
#include "runtime/train/train_config.h"

namespace lockstep {
namespace {

std::string split_name(const DatasetInfo& i) { return i.path + ":/" + i.group + "/" + i.y_name; }

std::string gib(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
  return text;
}

// What a rank allocates for the model on the CPU: floats per row of a micro-batch (the layers'
// outputs and their gradients, the last one `outputs` at each of info.positions positions, and the
// im2col matrix a convolution builds) and parameter floats.
// Zero when the model does not fit the data: its own check names that problem when it is built.
struct ModelFloats {
  double per_row = 0, params = 0;
};

ModelFloats model_floats(const DatasetInfo& info, const TrainConfig& c, int outputs) {
  SampleShape input;
  for (int64_t d : info.sample_shape) {
    if (d <= 0 || d > INT_MAX / 2) return {};
    input.push_back(static_cast<int>(d));
  }
  std::vector<LayerPlan> plan;
  try {
    plan = plan_model(parse_model_spec(c.model), input, outputs, info.positions);
  } catch (const UsageError&) {
    return {};
  }
  ModelFloats f;
  // With --recompute blocks, what a recomputing layer (a GPT block) keeps exists for one layer at a
  // time (in the shared workspace), not for every one: the largest counts once. (gelu: counted
  // whole, an upper bound.)
  double largest_block = 0;
  for (const LayerPlan& p : plan) {
    f.per_row += 2.0 * static_cast<double>(shape_size(p.out));
    const LayerType& type = find_layer_type(p.spec.type);
    const double scratch = type.scratch_floats ? type.scratch_floats(p) : 0.0;
    if (c.recompute == Recompute::blocks && type.recomputes)
      largest_block = std::max(largest_block, scratch);
    else
      f.per_row += scratch;
    f.params += static_cast<double>(p.params);
  }
  f.per_row += largest_block;
  return f;
}

}  // namespace

std::vector<int> sample_shape_of(const DatasetInfo& info) {
  std::vector<int> shape;
  for (int64_t d : info.sample_shape) {
    if (d <= 0 || d > INT32_MAX / 2)
      throw UsageError(info.path + ": sample dimension " + std::to_string(d) + " of " +
                       info.x_name + " is out of range");
    shape.push_back(static_cast<int>(d));
  }
  return shape;
}

DatasetSpec test_split_spec(const TrainConfig& c) {
  DatasetSpec test = c.train;
  test.group = c.test_group;
  test.allow_non_finite = false;
  return test;
}

DatasetInfo inspect_training_data(TrainConfig& c) {
  c.train.targets = c.loss == LossKind::cross_entropy ? TargetKind::labels
                    : c.loss == LossKind::mse         ? TargetKind::values
                                                      : TargetKind::automatic;
  // Under --on-nan skip a NaN or infinite training row reaches the step guard, which skips its
  // step; otherwise, and always in the evaluation, the reader refuses it naming the row.
  c.train.allow_non_finite = c.guard.on_nan == NanPolicy::skip;
  DatasetInfo info = inspect_dataset(c.train);
  const DatasetInfo test = inspect_dataset(test_split_spec(c));
  if (test.sample_shape != info.sample_shape)
    throw UsageError(c.train.path + ": the " + c.test_group + " split's samples differ in shape " +
                     "from the " + c.train.group + " split's");
  if (test.classification != info.classification)
    throw UsageError(c.train.path + ": the " + c.test_group + " split's targets are " +
                     (test.classification ? "class labels" : "regression values") + " but the " +
                     c.train.group + " split's are not; use the same kind in both");
  if (test.num_classes != info.num_classes && info.positions > 1)
    throw UsageError(c.train.path + ": the " + c.test_group + " split's vocab_size is " +
                     std::to_string(test.num_classes) + " but the " + c.train.group +
                     " split's is " + std::to_string(info.num_classes) + "; use one vocabulary");
  if (c.loss == LossKind::mse && info.classification)
    throw UsageError("--loss mse needs float targets, but " + split_name(info) +
                     " holds integer class labels (use --loss cross-entropy)");
  if (c.loss == LossKind::automatic) {
    c.loss = info.classification ? LossKind::cross_entropy : LossKind::mse;
    if (info.classification && info.y_type.rfind("float", 0) == 0) {
      LS_LOG(info) << split_name(info) << " holds " << info.y_type
                   << " whole numbers and the file declares num_classes = " << info.num_classes
                   << ": training a classifier (--loss mse trains a regression on them instead)";
    }
  }
  return info;
}

void check_batch_fits(const TrainConfig& c, const DatasetInfo& info, int outputs,
                      int64_t micro_rows, uint64_t held_bytes, uint64_t host_memory) {
  const int64_t B = c.global_batch;
  if (B > info.rows)
    throw UsageError("--global-batch " + std::to_string(B) + " is larger than the " +
                     std::to_string(info.rows) + " training samples of " + info.path + ":/" +
                     info.group + ": use at most " + std::to_string(info.rows));
  // Batches in flight: the training loader's prefetch queue, the one in use, an evaluation batch.
  // The model's buffers count on the CPU only: on a GPU they are device memory. Parameters,
  // gradients and up to two optimizer buffers are as large as the parameters.
  const double rows = static_cast<double>(micro_rows);
  // A row holds its inputs, a label per position, its mask and its row number (8 bytes).
  const double batches = 4.0 * rows * (c.prefetch + 2.0) *
                         (static_cast<double>(info.sample_size + info.positions) + 2.0);
  const ModelFloats m =
      c.device == DeviceKind::cpu ? model_floats(info, c, outputs) : ModelFloats{};
  const double activations = 4.0 * rows * m.per_row, params = 4.0 * 4.0 * m.params;
  const double held = static_cast<double>(held_bytes);
  const double need = batches + activations + params + held;
  const int ranks = std::max(c.host_ranks, 1);
  const uint64_t have = host_memory;
  if (have > 0 && need * ranks > static_cast<double>(have))
    throw UsageError("--global-batch " + std::to_string(B) + " with --model " + c.model +
                     " needs about " + gib(need) + " per rank" +
                     (ranks > 1 ? ", " + gib(need * ranks) + " for the " + std::to_string(ranks) +
                                      " ranks on this host"
                                : std::string()) +
                     " (" + gib(batches) + " for " + std::to_string(c.prefetch + 2) +
                     " batches in flight (--prefetch " + std::to_string(c.prefetch) + " + 2), " +
                     gib(activations) + " for activations, at " + std::to_string(micro_rows) +
                     " rows per rank and micro-batch, " + gib(params) +
                     " for parameters, gradients and optimizer state" +
                     (held > 0 ? ", " + gib(held) + " for the data held in memory" : "") +
                     "), more than the " + gib(static_cast<double>(have)) +
                     " of memory this host has available: " +
                     (held > 0 ? "read the data from the file (--data-in-memory-mb 0), " : "") +
                     (batches > activations + params ? "lower --prefetch, " : "") +
                     "lower --global-batch, raise --grad-accum or use a smaller --model");
}

namespace {

// A number of bytes from a cgroup file; 0 when absent or "max" (no limit).
uint64_t cgroup_bytes(const std::string& path) {
  std::ifstream in(path);
  std::string text;
  if (!(in >> text) || text == "max") return 0;
  try {
    return std::stoull(text);
  } catch (const std::exception&) {
    return 0;
  }
}

// What this process's memory cgroup still allows (its limit less its usage); 0 when unlimited
// or unknown. cgroup v2 first, then v1.
uint64_t cgroup_room() {
  for (const auto& [limit_file, usage_file] :
       {std::pair<std::string, std::string>{"/sys/fs/cgroup/memory.max",
                                            "/sys/fs/cgroup/memory.current"},
        {"/sys/fs/cgroup/memory/memory.limit_in_bytes",
         "/sys/fs/cgroup/memory/memory.usage_in_bytes"}}) {
    const uint64_t limit = cgroup_bytes(limit_file);
    // v1 reports "no limit" as a huge number (a page count's worth of bytes near 2^63).
    if (limit == 0 || limit > (uint64_t{1} << 60)) continue;
    const uint64_t used = cgroup_bytes(usage_file);
    return limit > used ? limit - used : 1;
  }
  return 0;
}

}  // namespace

uint64_t available_host_memory() {
  uint64_t have = 0;
  std::ifstream in("/proc/meminfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("MemAvailable:", 0) == 0) have = std::stoull(line.substr(13)) * 1024;
  if (have == 0) {
    const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0) have = static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
  }
  const uint64_t room = cgroup_room();
  return room > 0 && (have == 0 || room < have) ? room : have;
}

}  // namespace lockstep
