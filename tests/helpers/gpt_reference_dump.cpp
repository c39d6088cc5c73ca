// gpt_reference_dump OUT.h5 [options]: a tiny Lockstep GPT on the CPU, written for PyTorch to
// recompute (scripts/reference/gpt_compare_torch.py, tests/gpt_torch_test.sh). The model is
// Model(parse_model_spec(spec), {T}, 256, B, {kernels}, T); the file holds
//   attributes      spec, batch, seq, vocab, steps, seed, kernels and the optimizer's settings
//   init/params/N   every parameter tensor by its name (Model::param_tensors()), as initialised
//   init/tokens     B x (T + 1) random bytes: inputs row[:T], targets row[1:]
//   init/loss       the mean cross-entropy over the B * T positions
//   init/grads/N    its gradient, tensor by tensor
//   train/tokens    [steps, B, T + 1]: a fresh random batch per AdamW step, from init/params
//   train/loss, train/grad_norm, train/lr   per step: before the update, before clipping, used
//   final/params/N  the parameters after the steps
// The steps are the trainer's: zero the gradient, forward, loss scaled 1/(B*T), backward, clip to
// the global norm, then Optimizer (adamw, decaying matrix_ranges only) at lr_at(schedule, step).
// No MPI: one process, as one rank trains.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/step/loss.h"
#include "kernels/step/optimizer.h"
#include "runtime/data/h5_writer.h"
#include "runtime/model/lr_schedule.h"
#include "runtime/model/model.h"
#include "runtime/model/optimizer.h"

namespace {

using lockstep::H5Id;
constexpr int kVocab = 256;

struct Options {
  std::string out;
  std::string spec = "gpt:layers=2,heads=2,dim=32,ctx=16";
  int batch = 4;
  int seq = 16;
  int steps = 20;
  uint64_t seed = 20261123;
  lockstep::CpuKernels kernels = lockstep::CpuKernels::openblas;
  lockstep::LrSchedule schedule{.kind = lockstep::LrScheduleKind::cosine,
                                .peak_lr = 1e-3,
                                .warmup_steps = 5,
                                .total_steps = 20,
                                .min_lr = 1e-4};
  double clip_norm = 1.25;  // some of the 20 steps clip, some do not
  lockstep::OptimizerConfig adamw{.kind = lockstep::OptimizerKind::adamw,
                                  .beta1 = 0.9f,
                                  .beta2 = 0.95f,
                                  .eps = 1e-8f,
                                  .weight_decay = 0.1f};
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    if (a == "--spec")
      o.spec = value();
    else if (a == "--batch")
      o.batch = std::stoi(value());
    else if (a == "--seq")
      o.seq = std::stoi(value());
    else if (a == "--steps")
      o.steps = std::stoi(value());
    else if (a == "--seed")
      o.seed = std::stoull(value());
    else if (a == "--kernels") {
      const std::string k = value();
      if (k != "best" && k != "openblas")
        throw std::invalid_argument("--kernels: best or openblas");
      o.kernels = k == "best" ? lockstep::CpuKernels::best : lockstep::CpuKernels::openblas;
    } else if (!a.empty() && a[0] != '-' && o.out.empty())
      o.out = a;
    else
      throw std::invalid_argument("unknown argument '" + a + "'");
  }
  if (o.out.empty())
    throw std::invalid_argument(
        "usage: gpt_reference_dump OUT.h5 [--spec S] [--batch B] [--seq T] [--steps N] [--seed S] "
        "[--kernels best|openblas]");
  o.schedule.total_steps = o.steps;
  return o;
}

// B rows of T + 1 random bytes.
std::vector<int32_t> random_tokens(const Options& o, std::mt19937_64& gen) {
  std::uniform_int_distribution<int32_t> byte(0, kVocab - 1);
  std::vector<int32_t> t(size_t(o.batch) * (o.seq + 1));
  for (int32_t& x : t) x = byte(gen);
  return t;
}

// Zeroes the gradient, runs forward and backward on `tokens`; returns the mean loss.
double loss_and_grads(lockstep::Model& m, const Options& o, const std::vector<int32_t>& tokens) {
  const int B = o.batch, T = o.seq;
  std::vector<float> x(size_t(B) * T);
  std::vector<int32_t> y(size_t(B) * T);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      x[size_t(b) * T + t] = static_cast<float>(tokens[size_t(b) * (T + 1) + t]);
      y[size_t(b) * T + t] = tokens[size_t(b) * (T + 1) + t + 1];
    }
  m.zero_grads();
  const float* logits = m.forward(x.data(), B);
  const lockstep::kernels::LossTotals r = lockstep::kernels::softmax_cross_entropy_cpu(
      logits, y.data(), nullptr, B * T, kVocab, 1.0f / float(B * T), m.output_grad());
  m.backward(B);
  return r.loss_sum / double(B * T);
}

// Every parameter tensor of `flat` (a params() or grads() copy) under group `group`, by name.
void put_tensors(hid_t file, const std::string& group, const lockstep::Model& m,
                 const std::vector<float>& flat) {
  for (const lockstep::ParamTensorInfo& t : m.param_tensors()) {
    const std::vector<float> v(flat.begin() + t.offset, flat.begin() + t.offset + t.count);
    lockstep::write_h5_dataset(file, group + "/" + t.name, t.shape, v);
  }
}

void put_attrs(hid_t file, const Options& o) {
  lockstep::write_h5_attr_string(file, "spec", o.spec);
  lockstep::write_h5_attr_string(file, "kernels",
                                 o.kernels == lockstep::CpuKernels::best ? "best" : "openblas");
  lockstep::write_h5_attr_int(file, "batch", o.batch);
  lockstep::write_h5_attr_int(file, "seq", o.seq);
  lockstep::write_h5_attr_int(file, "vocab", kVocab);
  lockstep::write_h5_attr_int(file, "steps", o.steps);
  lockstep::write_h5_attr_int(file, "seed", static_cast<int64_t>(o.seed));
  lockstep::write_h5_attr_double(file, "lr", o.schedule.peak_lr);
  lockstep::write_h5_attr_double(file, "min_lr", o.schedule.min_lr);
  lockstep::write_h5_attr_int(file, "warmup_steps", o.schedule.warmup_steps);
  lockstep::write_h5_attr_string(file, "lr_schedule", lockstep::lr_schedule_name(o.schedule.kind));
  lockstep::write_h5_attr_double(file, "beta1", o.adamw.beta1);
  lockstep::write_h5_attr_double(file, "beta2", o.adamw.beta2);
  lockstep::write_h5_attr_double(file, "eps", o.adamw.eps);
  lockstep::write_h5_attr_double(file, "weight_decay", o.adamw.weight_decay);
  lockstep::write_h5_attr_double(file, "clip_norm", o.clip_norm);
}

void run(const Options& o) {
  lockstep::ModelPlacement place;
  place.cpu_kernels = o.kernels;
  lockstep::Model m(lockstep::parse_model_spec(o.spec), {o.seq}, kVocab, o.batch, place, o.seq);
  m.init_params(o.seed);
  std::mt19937_64 gen(o.seed + 1);
  H5Id file = lockstep::create_h5_file(o.out);
  put_attrs(file.get(), o);

  const std::vector<int32_t> tokens = random_tokens(o, gen);
  put_tensors(file.get(), "init/params", m, m.params_to_host());
  const double loss = loss_and_grads(m, o, tokens);
  lockstep::write_h5_dataset(file.get(), "init/tokens", {o.batch, o.seq + 1}, tokens);
  lockstep::write_h5_dataset(file.get(), "init/loss", {}, std::vector<double>{loss});
  put_tensors(file.get(), "init/grads", m,
              std::vector<float>(m.grads(), m.grads() + m.param_count()));

  lockstep::Optimizer opt(o.adamw, m.param_count());
  opt.set_decay_ranges(lockstep::matrix_ranges(m.param_tensors()));
  std::vector<int32_t> all_tokens;
  std::vector<double> losses, norms, lrs;
  for (int step = 0; step < o.steps; ++step) {
    const std::vector<int32_t> batch = random_tokens(o, gen);
    all_tokens.insert(all_tokens.end(), batch.begin(), batch.end());
    losses.push_back(loss_and_grads(m, o, batch));
    norms.push_back(
        lockstep::kernels::clip_by_global_norm_cpu(m.grads(), m.param_count(), o.clip_norm));
    lrs.push_back(lockstep::lr_at(o.schedule, step));
    opt.step(m.params(), m.grads(), static_cast<float>(lrs.back()));
  }
  const int64_t n = o.steps;
  lockstep::write_h5_dataset(file.get(), "train/tokens", {n, o.batch, o.seq + 1}, all_tokens);
  lockstep::write_h5_dataset(file.get(), "train/loss", {n}, losses);
  lockstep::write_h5_dataset(file.get(), "train/grad_norm", {n}, norms);
  lockstep::write_h5_dataset(file.get(), "train/lr", {n}, lrs);
  put_tensors(file.get(), "final/params", m, m.params_to_host());
  std::printf("%s: %zu parameters, loss %.6f at init, %.6f at step %d\n", o.spec.c_str(),
              m.trainable_count(), loss, losses.empty() ? loss : losses.back(), o.steps);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse(argc, argv);
    run(o);
    std::printf("wrote %s\n", o.out.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpt_reference_dump: %s\n", e.what());
    return 1;
  }
  return 0;
}
