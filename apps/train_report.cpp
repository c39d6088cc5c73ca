#include "apps/train_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "runtime/base/knobs.h"
#include "runtime/base/log.h"
#include "runtime/data/h5_writer.h"
#include "runtime/data/hdf5_util.h"
#include "runtime/model/layer_registry.h"
#include "runtime/observe/progress.h"
#include "runtime/train/train_checkpoint.h"

namespace lockstep {

namespace {

struct Truth {
  std::vector<double> w;
  double b = 0;
};

// The true w and b of a lockstep-data regression file, if it has them and their sizes fit.
std::optional<Truth> read_truth(const std::string& path, size_t features) {
  Hdf5Lock lock;
  H5Id file = open_h5_readonly(path);
  auto w = read_h5_attr_doubles(file.get(), "true_w");
  auto b = read_h5_attr_double(file.get(), "true_b");
  if (!w || !b || w->size() != features) return std::nullopt;
  return Truth{*w, *b};
}

void print_distance_to_truth(Trainer& t) {
  const Model& m = t.model();
  if (m.plan().size() != 1 || m.outputs() != 1) return;  // only a plain linear model has one w
  const size_t d = m.input_size();
  std::optional<Truth> truth = read_truth(t.config().train.path, d);
  if (!truth) return;
  const std::vector<float> params = m.params_to_host();  // a copy down when trained on a GPU
  double w_err = 0;
  for (size_t i = 0; i < d; ++i)
    w_err = std::max(w_err, std::fabs(static_cast<double>(params[i]) - truth->w[i]));
  double b_err = std::fabs(static_cast<double>(params[d]) - truth->b);
  std::printf("w_max_error=%.6f\nb_error=%.6f\n", w_err, b_err);
}

double ms_per_step(double seconds, int64_t steps) {
  return steps > 0 ? 1e3 * seconds / static_cast<double>(steps) : 0.0;
}

// What --recompute does for this model, for the header's model line ("" when none).
const char* recompute_text(Recompute r, const Model& m) {
  if (r == Recompute::none) return "";
  const bool any = std::any_of(m.plan().begin(), m.plan().end(), [](const LayerPlan& p) {
    return find_layer_type(p.spec.type).recomputes;
  });
  if (!any) return " (--recompute: no layer of this model keeps activations it could recompute)";
  return r == Recompute::gelu
             ? " (--recompute gelu: the GELU outputs computed again in the backward pass)"
             : " (--recompute blocks: each block's activations computed again in the backward "
               "pass)";
}

}  // namespace

void print_run_header(Trainer& t, int world_size, const char* device, const char* comm,
                      int blas_threads, bool evaluate_only) {
  const TrainConfig& c = t.config();
  const DatasetInfo& info = t.train_info();
  // --eval-only: the trainer's split is the one evaluated, and nothing is trained.
  const std::string samples =
      evaluate_only ? "samples of split " + info.group + " (evaluated)" : "training samples";
  char steps[256];
  if (evaluate_only)
    std::snprintf(steps, sizeof steps, "evaluation batch %lld (%lld per rank); nothing is trained",
                  static_cast<long long>(c.global_batch / c.grad_accum),
                  static_cast<long long>(c.global_batch / c.grad_accum / world_size));
  else
    std::snprintf(steps, sizeof steps,
                  "global batch %lld (%lld per rank x %d micro-batch(es)), %lld steps per epoch, "
                  "%lld steps in all; optimizer %s, peak lr %g, schedule %s",
                  static_cast<long long>(c.global_batch),
                  static_cast<long long>(c.global_batch / c.grad_accum / world_size), c.grad_accum,
                  static_cast<long long>(t.steps_per_epoch()),
                  static_cast<long long>(t.total_steps()), optimizer_name(c.optimizer.kind),
                  t.lr_at_step(std::max<int64_t>(c.warmup_steps, 0)),
                  lr_schedule_name(c.lr_schedule));
  std::fprintf(
      stderr,
      "lockstep-train: %d rank(s) on %s, %s communicator, %d BLAS thread(s) per rank%s\n"
      "data: %s, %lld %s of shape %s, %s%s\n"
      "model: %s%s\n%s\n"
      "%s\n",
      world_size, device, comm, blas_threads,
      t.model().lanes() > 1 ? " (lanes: each runs the model over its own rows)" : "",
      info.path.c_str(), static_cast<long long>(info.rows), samples.c_str(),
      to_string(t.model().plan().front().in).c_str(),
      info.classification ? (std::to_string(info.num_classes) + " classes").c_str() : "regression",
      info.positions > 1 ? (", a prediction per token at " + std::to_string(info.positions) +
                            " positions (losses per token" +
                            (byte_level_tokens(info) ? ", and in bits per byte" : "") + ")")
                               .c_str()
                         : "",
      c.model.c_str(), recompute_text(c.recompute, t.model()), t.model().summary().c_str(), steps);
  if (c.eval_every > 0 || c.eval_steps > 0) {
    const std::string every =
        c.eval_every > 0 ? " and every " + std::to_string(c.eval_every) + " steps" : "";
    const std::string part =
        c.eval_steps > 0
            ? ", its first " + std::to_string(c.eval_steps) + " batch(es) of " +
                  std::to_string(c.global_batch / c.grad_accum) + " rows (--eval-steps)"
            : ", all of it";
    std::fprintf(stderr, "evaluation: split %s at each epoch's end%s%s\n", c.test_group.c_str(),
                 every.c_str(), part.c_str());
  }
  std::fprintf(stderr, "memory per rank: %s\n", t.memory_text().c_str());
  std::fprintf(stderr,
               "deadlines: a collective %g s (--timeout); start-up, the first %lld steps and the "
               "first evaluation %g s (--startup-timeout)\n",
               static_cast<double>(t.steady_timeout().count()) / 1000.0,
               static_cast<long long>(Trainer::kStartupSteps),
               static_cast<double>(t.comm().timeout().count()) / 1000.0);
  // Under --verbose (debug logging): the environment knobs the run follows (knobs.h).
  if (log_enabled(LogLevel::debug))
    std::fprintf(stderr, "environment knobs: %s\n", knobs_text(configured_knobs()).c_str());
  const GuardOptions& g = c.guard;
  if (!g.checkpoint_dir.empty()) {
    const uint64_t bytes = checkpoint_bytes(t);
    const Millis deadline = checkpoint_deadline(g, t.steady_timeout(), bytes);
    const char* earlier = "none allowed";
    if (g.existing == ExistingCheckpoints::keep) earlier = "kept (--resume)";
    if (g.existing == ExistingCheckpoints::replace) earlier = "deleted (--overwrite-checkpoints)";
    const std::string when =
        g.checkpoint_every > 0
            ? "every " + std::to_string(g.checkpoint_every) + " step(s), at the end and on a stop"
            : "at the end and on a stop (--checkpoint-every 0)";
    const std::string kept = g.keep_checkpoints > 0
                                 ? "newest " + std::to_string(g.keep_checkpoints) + " kept"
                                 : "all kept (--keep-checkpoints 0)";
    std::fprintf(stderr,
                 "checkpoints: %s, %s, %s, %.2f MB each; ranks wait %g s for a save "
                 "(--checkpoint-timeout); an earlier run's checkpoints: %s\n",
                 g.checkpoint_dir.c_str(), when.c_str(), kept.c_str(),
                 static_cast<double>(bytes) / 1e6, static_cast<double>(deadline.count()) / 1000.0,
                 earlier);
  }
}

void print_final_report(Trainer& t, const TrainResult& r) {
  const StepTimes& s = r.times;
  std::fprintf(stderr,
               "time per step (rank 0): %.2f ms = data %.2f + forward %.2f + backward %.2f + "
               "comm %.2f + optimizer %.2f ms; %.0f samples/s\n",
               ms_per_step(s.total, s.steps), ms_per_step(s.data, s.steps),
               ms_per_step(s.forward, s.steps), ms_per_step(s.backward, s.steps),
               ms_per_step(s.comm, s.steps), ms_per_step(s.optimizer, s.steps),
               r.samples_per_second);
  std::printf("samples_per_second=%.1f\n", r.samples_per_second);
  std::printf(
      "step_ms=%.3f data_ms=%.3f forward_ms=%.3f backward_ms=%.3f comm_ms=%.3f "
      "optimizer_ms=%.3f\n",
      ms_per_step(s.total, s.steps), ms_per_step(s.data, s.steps), ms_per_step(s.forward, s.steps),
      ms_per_step(s.backward, s.steps), ms_per_step(s.comm, s.steps),
      ms_per_step(s.optimizer, s.steps));
  print_test_figures(t, r.test);
}

void print_test_figures(Trainer& t, const EvalResult& test) {
  if (!t.train_info().classification) {
    print_distance_to_truth(t);
    std::printf("test_mse=%.6f\n", test.loss);
    std::printf("test_loss=%.6f\n", test.loss);
  } else {
    if (byte_level_tokens(t.train_info()))
      std::printf("test_bits_per_byte=%.4f\n", bits_per_byte(test.loss));
    std::printf("test_loss=%.4f\n", test.loss);
    std::printf("test_accuracy=%.4f\n", test.accuracy);
  }
  std::fflush(stdout);
}

}  // namespace lockstep
