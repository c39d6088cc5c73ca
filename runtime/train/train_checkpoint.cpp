#include "runtime/train/train_checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "runtime/base/error.h"
#include "runtime/base/log.h"
#include "runtime/comm/agree.h"
#include "runtime/train/config_table.h"
#include "runtime/train/trainer.h"

namespace lockstep {
namespace {

// Scalars that must match for the resumed run to see the same global batches.
struct Pinned {
  const char* scalar;
  const char* option;
  double value;
  const char* words[2];  // how 0 and 1 read for a switch; null for a number
};

TrainingParts parts_of(Trainer& t) {
  return {t.config(),    t.state(),           t.model(),
          t.optimizer(), t.steps_per_epoch(), t.train_info().rows};
}

std::vector<Pinned> pinned_options(const TrainingParts& t) {
  const TrainConfig& c = t.config;
  return {{"global_batch", "--global-batch", static_cast<double>(c.global_batch), {}},
          {"shuffle", "shuffling", c.shuffle ? 1.0 : 0.0, {"off", "on"}},
          {"drop_remainder", "--remainder", c.drop_remainder ? 1.0 : 0.0, {"mask", "drop"}},
          {"train_rows", "training rows", static_cast<double>(t.train_rows), {}}};
}

std::string canonical_spec(const TrainConfig& c) { return to_string(parse_model_spec(c.model)); }

// Optimizer buffers are as long as the parameter buffer and share its layout: split them by the
// same tensors, named "<buffer>/<tensor>".
template <class F>
void for_each_state_tensor(const TrainingParts& t, F&& f) {
  std::vector<ParamTensorInfo> tensors = t.model.param_tensors();
  for (StateBuffer& buf : t.optimizer.state())
    for (const ParamTensorInfo& p : tensors) f(buf, p);
}

std::string shown(const Pinned& p, double v) {
  if (p.words[0] != nullptr) return p.words[v != 0 ? 1 : 0];
  std::ostringstream os;
  os << static_cast<int64_t>(v);
  return os.str();
}

void check_resumable(Trainer& t, const CheckpointState& s, const std::string& path,
                     bool evaluate_only) {
  check_compatible(s, expected_checkpoint(t), path);
  if (evaluate_only) return;  // what decides the training's samples does not touch an evaluation
  if (s.seed != t.config().seed)
    throw UsageError("checkpoint " + path + " was written with --seed " + std::to_string(s.seed) +
                     ", this run has --seed " + std::to_string(t.config().seed) +
                     ": the seed fixes every epoch's shuffle, so a resumed run must keep it");
  for (const Pinned& p : pinned_options(parts_of(t))) {
    double saved = s.scalars.at(p.scalar);
    if (saved != p.value)
      throw UsageError("checkpoint " + path + " was written with " + p.option + " " +
                       shown(p, saved) + ", this run has " + shown(p, p.value) +
                       ": it decides which samples each step sees, so a resumed run must keep it");
  }
  if (s.step_in_epoch >= t.steps_per_epoch())
    throw UsageError("checkpoint " + path + " is at step " + std::to_string(s.step_in_epoch) +
                     " of an epoch that has only " + std::to_string(t.steps_per_epoch()) +
                     " steps");
}

// The checkpoint's parameters and optimizer buffers as whole flat buffers of this trainer's
// layout (its gaps zero), in Optimizer::state() order after the parameters.
std::vector<std::vector<float>> whole_buffers(Trainer& t, const CheckpointState& s) {
  const size_t n = t.model().param_count();
  std::vector<std::vector<float>> out(1, std::vector<float>(n, 0.0f));
  for (const ParamTensorInfo& p : t.model().param_tensors()) {
    const NamedTensor* saved = find_tensor(s.params, p.name);
    std::copy_n(saved->data.begin(), p.count, out[0].begin() + static_cast<ptrdiff_t>(p.offset));
  }
  for (StateBuffer& buf : t.optimizer().state()) {
    out.emplace_back(n, 0.0f);
    for (const ParamTensorInfo& p : t.model().param_tensors()) {
      const NamedTensor* saved = find_tensor(s.optimizer, buf.name + "/" + p.name);
      std::copy_n(saved->data.begin(), p.count,
                  out.back().begin() + static_cast<ptrdiff_t>(p.offset));
    }
  }
  return out;
}

// What the model was planned for, beside the options in the record: its input's shape
// ("input_shape=28,28,1"), its outputs per position and its positions, so that a program holding
// only the checkpoint (lockstep-export) can plan the model and check the tensors against it.
std::string model_record(const Model& m) {
  std::string shape;
  for (int d : m.plan().front().in) {
    if (!shape.empty()) shape += ',';
    shape += std::to_string(d);
  }
  return "input_shape=" + shape + "\noutputs=" + std::to_string(m.outputs() / m.positions()) +
         "\npositions=" + std::to_string(m.positions()) + "\n";
}

std::string seconds_text(Millis t) {
  char text[32];
  std::snprintf(text, sizeof text, "%g s", static_cast<double>(t.count()) / 1000.0);
  return text;
}

}  // namespace

CheckpointState capture_checkpoint(const TrainingParts& t, int world_size) {
  CheckpointState s;
  const TrainConfig& c = t.config;
  s.model_spec = canonical_spec(c);
  s.config = config_record(c) + model_record(t.model);
  s.world_size = world_size;
  const TrainState& now = t.state;
  s.epoch = now.epoch;
  s.step_in_epoch = now.step_in_epoch;
  if (s.step_in_epoch >= t.steps_per_epoch) {
    s.epoch += 1;
    s.step_in_epoch = 0;
  }
  s.global_step = now.global_step;
  s.seed = c.seed;
  s.rng_state = {c.seed, static_cast<uint64_t>(s.epoch)};  // the next shuffle's inputs
  // Host copies of the parameters and optimizer state (copied down when they live on a GPU).
  const std::vector<float> params = t.whole_params ? *t.whole_params : t.model.params_to_host();
  for (const ParamTensorInfo& p : t.model.param_tensors())
    s.params.push_back(
        {p.name, p.shape,
         std::vector<float>(params.begin() + static_cast<ptrdiff_t>(p.offset),
                            params.begin() + static_cast<ptrdiff_t>(p.offset + p.count))});
  std::vector<StateBuffer> buffers = t.optimizer.state();
  for (size_t i = 0; i < buffers.size(); ++i) {
    StateBuffer& buf = buffers[i];
    const std::vector<float> state = t.whole_state ? (*t.whole_state)[i] : buf.data->to_host();
    for (const ParamTensorInfo& p : t.model.param_tensors()) {
      const float* d = state.data() + p.offset;
      s.optimizer.push_back({buf.name + "/" + p.name, p.shape, std::vector<float>(d, d + p.count)});
    }
  }
  s.scalars["optimizer_steps"] = static_cast<double>(t.optimizer.steps());
  s.scalars["samples_seen"] = static_cast<double>(now.samples_seen);
  for (const Pinned& p : pinned_options(t)) s.scalars[p.scalar] = p.value;
  return s;
}

CheckpointState capture_checkpoint(Trainer& t, int world_size) {
  const std::vector<std::vector<float>> whole = t.optimizer_state();
  const std::vector<float> params = t.params_to_save();
  TrainingParts parts = parts_of(t);
  parts.whole_state = &whole;
  parts.whole_params = &params;
  return capture_checkpoint(parts, world_size);
}

uint64_t checkpoint_bytes(const TrainingParts& t) {
  return t.model.param_count() * sizeof(float) * (1 + t.optimizer.state().size());
}

uint64_t checkpoint_bytes(Trainer& t) { return checkpoint_bytes(parts_of(t)); }

std::string write_checkpoint(const TrainingParts& run, Communicator& comm, const GuardOptions& o) {
  const int64_t step = run.state.global_step;
  std::string path = checkpoint_file_name(o.checkpoint_dir, step);
  if (comm.rank() == 0) {
    path =
        save_checkpoint(o.checkpoint_dir, capture_checkpoint(run, comm.size()), o.keep_checkpoints);
    LS_LOG(info) << "checkpoint at step " << step << ": " << path;
  }
  const Millis deadline = checkpoint_deadline(o, comm.timeout(), checkpoint_bytes(run));
  try {
    comm.barrier_async()->wait(deadline);
  } catch (const TimeoutError& e) {
    throw TimeoutError(std::string(e.what()) + " (waiting for rank 0 to write " + path +
                       "; the checkpoint deadline is " + seconds_text(deadline) +
                       ": --checkpoint-timeout sets it)");
  }
  return path;
}

CheckpointExpectation expected_checkpoint(Trainer& t) {
  CheckpointExpectation e;
  e.model_spec = canonical_spec(t.config());
  for (const ParamTensorInfo& p : t.model().param_tensors())
    e.params.push_back({p.name, p.shape, {}});
  for_each_state_tensor(parts_of(t), [&](StateBuffer& buf, const ParamTensorInfo& p) {
    e.optimizer.push_back({buf.name + "/" + p.name, p.shape, {}});
  });
  e.scalars = {"optimizer_steps", "samples_seen"};
  for (const Pinned& p : pinned_options(parts_of(t))) e.scalars.push_back(p.scalar);
  return e;
}

std::string resume_from_checkpoint(Trainer& t, const std::string& path, bool evaluate_only) {
  Communicator& comm = t.comm();
  std::string problem, file;
  CheckpointState s;
  // Rank 0 alone reads the file: N ranks reading one file of a shared file system do not scale,
  // and the other ranks need not see --checkpoint-dir at all (a node-local folder).
  if (comm.rank() == 0) {
    try {
      file = resolve_checkpoint(path);
      s = load_checkpoint(file);
      check_resumable(t, s, file, evaluate_only);
    } catch (const UsageError& e) {
      problem = e.what();
    }
  }
  // Over the trainer's communicator: its ranks, and only they, leave together.
  agree_or_throw(comm, problem.empty(), problem);
  // Rank 0's checkpoint to every rank, whole: the parameters, each optimizer buffer (which a
  // sharded optimizer keeps its blocks of), the counters.
  const size_t buffers = 1 + t.optimizer().state().size();
  std::vector<std::vector<float>> whole =
      comm.rank() == 0
          ? whole_buffers(t, s)
          : std::vector<std::vector<float>>(buffers, std::vector<float>(t.model().param_count()));
  for (std::vector<float>& v : whole) comm.broadcast(v.data(), v.size(), DType::f32, 0);
  t.model().write_params(0, whole[0].data(), whole[0].size());
  for (size_t i = 1; i < buffers; ++i) t.load_optimizer_state(i - 1, whole[i]);
  int64_t counters[6] = {
      s.epoch,
      s.step_in_epoch,
      s.global_step,
      s.world_size,
      static_cast<int64_t>(comm.rank() == 0 ? s.scalars.at("optimizer_steps") : 0),
      static_cast<int64_t>(comm.rank() == 0 ? s.scalars.at("samples_seen") : 0)};
  comm.broadcast(counters, 6, DType::i64, 0);
  std::vector<char> name(file.begin(), file.end());
  int64_t name_size = static_cast<int64_t>(name.size());
  comm.broadcast(&name_size, 1, DType::i64, 0);
  name.resize(static_cast<size_t>(name_size));
  comm.broadcast(name.data(), name.size(), DType::u8, 0);
  file.assign(name.begin(), name.end());
  t.optimizer().set_steps(counters[4]);
  TrainState state;
  state.epoch = static_cast<int>(counters[0]);
  state.step_in_epoch = counters[1];
  state.global_step = counters[2];
  state.samples_seen = counters[5];
  t.restore(state);
  // An evaluation's steps per epoch are not the run's (it reads the test split alone).
  if (evaluate_only)
    LS_LOG(info) << "evaluating " << file << ": step " << state.global_step << " (epoch "
                 << state.epoch + 1 << "), written at " << counters[3] << " rank(s)";
  else
    LS_LOG(info) << "resuming from " << file << ": step " << state.global_step << " (epoch "
                 << state.epoch + 1 << ", step " << state.step_in_epoch << " of "
                 << t.steps_per_epoch() << "), written at " << counters[3] << " rank(s)";
  return file;
}

}  // namespace lockstep
