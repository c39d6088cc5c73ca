// lockstep-predict: a trained model's outputs for every row of a split, in input order, at any
// world size:
//
//   mpiexec -n 2 lockstep-predict --checkpoint ckpt/ --data fmnist.h5 --group test --out pred.h5
//
// The rows are cut into batches of --batch rows from the first row on (one batch of every row when
// --batch is larger), and the batches into one contiguous run per rank: a row meets the same batch
// and kernels at any world size, so the predictions are the same bits at 1 rank or 3. Rank 0
// gathers and writes PRED.h5 (to a temporary name, renamed into place when complete). Only the
// split's inputs are read (labels or targets may be absent); what is written follows the
// checkpoint's model: its run's loss (cross-entropy or mse, else the file's targets by the label
// rule) and its head's width:
//   classification  logits (N, classes) float32, predicted (N) int32 (the largest logit; the lowest
//                   class on a tie)
//   regression      predictions (N, K) float32
//   tokens (a GPT)  predicted (N, T) int32 at every position; logits (N, T, V) float32, or with
//                   --top K the K most likely next tokens, top_ids (N, T, K) int32 and top_probs
//                   (N, T, K) float32 (softmax probabilities, most likely first)
// with the attributes model (the checkpoint's spec), checkpoint (its path), step (its global step),
// data, group and rows. Exit 2 for bad input (a split whose rows do not fit the model, a checkpoint
// that is missing or damaged, an output that exists: nothing is written), 1 at run time.
#include <algorithm>
#include <boost/program_options.hpp>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <string>
#include <system_error>
#include <vector>

#include "apps/checkpoint_model.h"
#include "apps/tool_options.h"
#include "kernels/cuda/memory.h"
#include "runtime/base/buffer.h"
#include "runtime/base/communicator.h"
#include "runtime/base/error.h"
#include "runtime/base/log.h"
#include "runtime/comm/agree.h"
#include "runtime/data/dataset.h"
#include "runtime/data/h5_writer.h"
#include "runtime/data/hdf5_util.h"
#include "runtime/data/sharded_loader.h"
#include "runtime/process/blas_threads.h"
#include "runtime/process/bootstrap.h"
#include "runtime/process/device.h"
#include "runtime/train/checkpoint.h"

namespace {

using lockstep::UsageError;
namespace po = boost::program_options;

struct Options {
  std::string checkpoint, data, group = "test", out, device = "cpu";
  int batch = 256, top = 0, threads = 0;
};

Options parse(int argc, char** argv, const lockstep::World& world, bool* done) {
  Options o;
  po::options_description options("lockstep-predict options");
  // clang-format off
  options.add_options()("checkpoint", po::value(&o.checkpoint)->required(),
                        "checkpoint file, or a folder (its newest)")(
      "data", po::value(&o.data)->required(), "the HDF5 file whose rows to predict")(
      "group", po::value(&o.group)->default_value(o.group), "the split (group) in it")(
      "out", po::value(&o.out)->required(), "the HDF5 file to write (must not exist)")(
      "batch", po::value(&o.batch)->default_value(o.batch), "rows per forward pass")(
      "top", po::value(&o.top)->default_value(o.top),
      "token data: keep the K most likely next tokens per position instead of all logits")(
      "threads", po::value(&o.threads)->default_value(o.threads),
      "BLAS threads per rank (0: the host's cores shared among its ranks)")(
      "device", po::value(&o.device)->default_value(o.device), "cpu, cuda or auto");
  // clang-format on
  po::variables_map vm;
  *done = !lockstep::apps::parse_tool_options(
      "lockstep-predict",
      "[mpiexec -n P] lockstep-predict --checkpoint CKPT --data FILE [--group G] --out PRED.h5 "
      "[--top K]",
      options, argc, argv, world, vm);
  if (*done) return o;
  if (o.batch <= 0) throw UsageError("--batch must be > 0");
  if (o.top < 0) throw UsageError("--top must be >= 0 (0: every logit)");
  if (o.threads < 0) throw UsageError("--threads must be >= 0 (0: the default)");
  return o;
}

// Rank r's batches of the nb global ones, of P ranks: [first, last).
std::pair<int64_t, int64_t> batches_of(int64_t nb, int r, int P) {
  return {nb * r / P, nb * (r + 1) / P};
}

int run(int argc, char** argv, const lockstep::World& world, lockstep::Communicator& comm) {
  bool done = false;
  Options o;
  // Every rank finds the same problem with the command line and --out: agreed, it is printed once
  // and every rank exits 2 (no MPI_Abort).
  std::string problem;
  int threads = 0;
  try {
    o = parse(argc, argv, world, &done);
    if (!done) {
      if (o.out.empty()) throw UsageError("--out must name the file to write");
      lockstep::apps::require_new_output("lockstep-predict", o.out);
      threads = o.threads > 0 ? o.threads : lockstep::default_blas_threads(world);
      lockstep::set_blas_threads(threads);
    }
  } catch (const UsageError& e) {
    problem = e.what();
  }
  lockstep::agree_or_throw(comm, problem.empty(), problem);
  if (done) return 0;
  if (const std::string crowded = lockstep::blas_threads_oversubscribed(threads, world);
      !crowded.empty()) {
    LS_LOG(warn) << "warning: " << crowded;
  }

  const std::string path = lockstep::resolve_checkpoint(o.checkpoint);
  const lockstep::CheckpointState state = lockstep::load_checkpoint(path);
  // The inputs alone are read: a file of inputs without labels or targets predicts.
  lockstep::DatasetSpec spec;
  spec.path = o.data;
  spec.group = o.group;
  spec.inputs_only = true;
  lockstep::DatasetReader reader(spec);
  lockstep::require_same_split(comm, reader);  // a node's stale copy would mix predictions
  const lockstep::DatasetInfo& info = reader.info();
  const bool tokens = info.positions > 1;
  if (!tokens && o.top > 0) throw UsageError("--top is for token data (a GPT's next tokens)");
  std::vector<int> shape(info.sample_shape.begin(), info.sample_shape.end());
  // What the model outputs follows the checkpoint, not the file: a token split's vocabulary, else
  // the head's width, as classes (the run's loss was cross-entropy) or regression values (mse).
  const std::string loss = lockstep::config_record_values(state.config)["loss"];
  bool classification = tokens || loss == "cross-entropy";
  if (!tokens && loss != "cross-entropy" && loss != "mse") {
    // A checkpoint without the record (written through the library): the file's targets decide,
    // by the label rule, as training would have.
    lockstep::DatasetSpec with_targets = spec;
    with_targets.inputs_only = false;
    try {
      classification = lockstep::inspect_dataset(with_targets).classification;
    } catch (const UsageError& e) {
      throw UsageError(path +
                       " records no loss, so the file's targets must say whether its model "
                       "classifies or regresses: " +
                       e.what());
    }
  }
  const std::vector<lockstep::LayerSpec> layers =
      lockstep::parse_model_spec(state.model_spec).layers;
  if (!tokens && !layers.empty() && layers.front().type == "embed")
    throw UsageError(path + " (model " + state.model_spec + ") reads token rows, a GPT's, but " +
                     o.data + ":" + o.group + " is not a token split (its inputs are " +
                     info.x_name + ", not tokens)");
  int classes = info.num_classes;
  if (!tokens) {
    try {
      classes = lockstep::apps::checkpoint_outputs(state, path, shape);
    } catch (const UsageError& e) {
      throw UsageError(path + " (model " + state.model_spec + ") cannot take the rows of " +
                       o.data + ":" + o.group + ": " +
                       lockstep::apps::planning_problem(e.what(), state.model_spec));
    }
  }
  // A --batch above the split's rows is cut to them before anything is sized by it: the one batch
  // holds every row either way, so the predictions are the same, and the model's buffers and ours
  // are sized by the rows rather than by a --batch of any size.
  const int batch = static_cast<int>(std::clamp<int64_t>(info.rows, 1, o.batch));

  lockstep::ModelPlacement place;
  const lockstep::DeviceChoice choice = lockstep::choose_device(o.device, world);
  lockstep::activate_device(choice);
  place.device = choice.kind;
  std::unique_ptr<lockstep::Model> model;
  try {
    model = lockstep::apps::model_from_checkpoint(state, path, shape, classes, batch, place,
                                                  info.positions);
  } catch (const UsageError& e) {
    throw UsageError("the checkpoint's model cannot take the rows of " + o.data + ":" + o.group +
                     ": " + lockstep::apps::planning_problem(e.what(), state.model_spec));
  }

  // What a row produces: its floats (logits, predictions, or top probabilities) and its ints
  // (predicted classes, or predicted tokens and top ids).
  const int positions = info.positions, outputs = model->outputs();
  const int keep = tokens && o.top > 0 ? std::min(o.top, classes) : classes;
  const size_t row_floats = static_cast<size_t>(positions) * keep;
  const size_t row_ints =
      classification ? static_cast<size_t>(positions) * (1 + (tokens && o.top > 0 ? keep : 0)) : 0;
  const int64_t rows = info.rows, nb = (rows + batch - 1) / batch;
  const auto [first, last] = batches_of(nb, world.rank, world.size);
  const int64_t row0 = std::min(rows, first * batch), row1 = std::min(rows, last * batch);
  const int64_t max_rows = (nb + world.size - 1) / world.size * batch;  // any rank's most

  std::vector<float> mine_f(static_cast<size_t>(max_rows) * row_floats, 0.0f);
  std::vector<int32_t> mine_i(static_cast<size_t>(max_rows) * std::max<size_t>(row_ints, 1), 0);
  std::vector<float> x(static_cast<size_t>(batch) * info.sample_size);
  std::vector<float> out_host(static_cast<size_t>(batch) * outputs);
  lockstep::Buffer<float> input(place.device, x.size());
  std::vector<int64_t> ids(static_cast<size_t>(batch));
  std::vector<int> order(static_cast<size_t>(classes));
  const auto start = std::chrono::steady_clock::now();
  for (int64_t r = row0; r < row1; r += batch) {
    const int n = static_cast<int>(std::min<int64_t>(batch, row1 - r));
    std::iota(ids.begin(), ids.begin() + n, r);
    reader.read_rows(ids.data(), static_cast<size_t>(n), x.data(), nullptr, nullptr);
    input.write(x.data(), 0, static_cast<size_t>(n) * info.sample_size);
    const float* out = model->forward(input.data(), n);
    const size_t count = static_cast<size_t>(n) * outputs;
    if (place.device == lockstep::DeviceKind::cuda)
      lockstep::kernels::cuda_copy_to_host(out_host.data(), out, count * sizeof(float));
    else
      std::copy(out, out + count, out_host.begin());
    for (int i = 0; i < n; ++i) {
      const size_t at = static_cast<size_t>(r - row0 + i);
      for (int p = 0; p < positions; ++p) {
        const float* l = out_host.data() + (static_cast<size_t>(i) * positions + p) * classes;
        float* f = mine_f.data() + at * row_floats + static_cast<size_t>(p) * keep;
        if (!classification) {
          std::copy(l, l + classes, f);
          continue;
        }
        int32_t* k =
            mine_i.data() + at * row_ints + static_cast<size_t>(p) * (row_ints / positions);
        k[0] = static_cast<int32_t>(std::max_element(l, l + classes) - l);
        if (keep == classes && !(tokens && o.top > 0)) {
          std::copy(l, l + classes, f);
          continue;
        }
        // The top K by logit (the lower id first on a tie), as softmax probabilities.
        std::iota(order.begin(), order.end(), 0);
        std::partial_sort(order.begin(), order.begin() + keep, order.end(),
                          [&](int a, int b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
        double total = 0;
        for (int c = 0; c < classes; ++c) total += std::exp(static_cast<double>(l[c]) - l[k[0]]);
        for (int j = 0; j < keep; ++j) {
          k[1 + j] = order[j];
          f[j] = static_cast<float>(std::exp(static_cast<double>(l[order[j]]) - l[k[0]]) / total);
        }
      }
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  // Every rank's run, padded to the same length, to every rank; rank 0 writes them in order.
  std::vector<float> all_f(mine_f.size() * world.size);
  std::vector<int32_t> all_i(mine_i.size() * world.size);
  comm.all_gather(mine_f.data(), all_f.data(), mine_f.size(), lockstep::DType::f32);
  comm.all_gather(mine_i.data(), all_i.data(), mine_i.size(), lockstep::DType::i32);
  double slowest = seconds;
  comm.all_reduce(&seconds, &slowest, 1, lockstep::DType::f64, lockstep::ReduceOp::max);
  if (world.rank == 0) {
    std::vector<float> f(static_cast<size_t>(rows) * row_floats);
    std::vector<int32_t> k(static_cast<size_t>(rows) * row_ints);
    for (int q = 0; q < world.size; ++q) {
      const auto [b0, b1] = batches_of(nb, q, world.size);
      const int64_t q0 = std::min(rows, b0 * batch), q1 = std::min(rows, b1 * batch);
      std::copy_n(all_f.begin() + static_cast<ptrdiff_t>(q * mine_f.size()), (q1 - q0) * row_floats,
                  f.begin() + q0 * static_cast<ptrdiff_t>(row_floats));
      if (row_ints > 0)
        std::copy_n(all_i.begin() + static_cast<ptrdiff_t>(q * mine_i.size()), (q1 - q0) * row_ints,
                    k.begin() + q0 * static_cast<ptrdiff_t>(row_ints));
    }
    const std::string tmp = o.out + ".tmp";
    // Written in full and closed with every step checked (close_h5_file) before the rename: a
    // full disk is "writing PRED.h5.tmp failed: No space left on device", and the temporary file
    // is removed on any failure.
    try {
      const lockstep::Hdf5Lock lock;
      lockstep::H5Id file = lockstep::create_h5_file(tmp);
      const std::vector<int64_t> rshape =
          tokens ? std::vector<int64_t>{rows, positions} : std::vector<int64_t>{rows};
      auto with = [&](std::vector<int64_t> s, int64_t last) {
        s.push_back(last);
        return s;
      };
      if (!classification) {
        lockstep::write_h5_dataset(file.get(), "predictions", lockstep::DType::f32,
                                   with(rshape, classes), f.data());
      } else {
        const size_t stride = row_ints / positions;
        std::vector<int32_t> predicted(static_cast<size_t>(rows) * positions);
        for (size_t i = 0; i < predicted.size(); ++i) predicted[i] = k[i * stride];
        lockstep::write_h5_dataset(file.get(), "predicted", lockstep::DType::i32, rshape,
                                   predicted.data());
        if (tokens && o.top > 0) {
          std::vector<int32_t> top_ids(static_cast<size_t>(rows) * positions * keep);
          for (size_t i = 0; i < predicted.size(); ++i)
            std::copy_n(k.begin() + static_cast<ptrdiff_t>(i * stride + 1), keep,
                        top_ids.begin() + static_cast<ptrdiff_t>(i * keep));
          lockstep::write_h5_dataset(file.get(), "top_ids", lockstep::DType::i32,
                                     with(rshape, keep), top_ids.data());
          lockstep::write_h5_dataset(file.get(), "top_probs", lockstep::DType::f32,
                                     with(rshape, keep), f.data());
        } else {
          lockstep::write_h5_dataset(file.get(), "logits", lockstep::DType::f32,
                                     with(rshape, classes), f.data());
        }
      }
      lockstep::write_h5_attr_string(file.get(), "model", state.model_spec);
      lockstep::write_h5_attr_string(file.get(), "checkpoint", path);
      lockstep::write_h5_attr_int(file.get(), "step", state.global_step);
      lockstep::write_h5_attr_string(file.get(), "data", o.data);
      lockstep::write_h5_attr_string(file.get(), "group", o.group);
      lockstep::write_h5_attr_int(file.get(), "rows", rows);
      lockstep::close_h5_file(file, tmp);
    } catch (...) {
      std::error_code ec;
      std::filesystem::remove(tmp, ec);
      throw;
    }
    std::error_code ec;
    std::filesystem::rename(tmp, o.out, ec);
    if (ec) {
      std::filesystem::remove(tmp, ec);
      throw lockstep::Error(o.out + ": cannot move the finished file into place");
    }
    std::printf(
        "lockstep-predict: %lld rows of %s:%s through %s (step %lld) -> %s; %.3f s on "
        "the slowest of %d rank(s), %.0f rows/s\n",
        static_cast<long long>(rows), o.data.c_str(), o.group.c_str(), path.c_str(),
        static_cast<long long>(state.global_step), o.out.c_str(), slowest, world.size,
        slowest > 0 ? rows / slowest : 0.0);
  }
  comm.barrier();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return lockstep::run_app(argc, argv,
                           [&](const lockstep::World& world, lockstep::Communicator& comm) {
                             return run(argc, argv, world, comm);
                           });
}
