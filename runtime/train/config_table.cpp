#include "runtime/train/config_table.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <type_traits>

#include "runtime/base/error.h"
#include "runtime/comm/buckets.h"
#include "runtime/model/model_spec.h"
#include "runtime/train/train_config.h"

namespace lockstep {

const char* option_group_title(OptionGroup g) {
  switch (g) {
    case OptionGroup::general: return "General";
    case OptionGroup::data: return "Data";
    case OptionGroup::model: return "Model and loss";
    case OptionGroup::optimizer: return "Optimizer and learning rate";
    case OptionGroup::loop: return "Training loop";
    case OptionGroup::output: return "Output";
    case OptionGroup::runtime: return "Runtime";
    case OptionGroup::faults: return "Checkpoints and faults";
  }
  return "?";
}

namespace {

using Row = OptionRow<TrainConfig>;
template <class F>
using Member = F& (*)(TrainConfig&);

template <class F>
const F& read(Member<F> m, const TrainConfig& c) {
  return m(const_cast<TrainConfig&>(c));
}

// As an ostream writes it: the record's format, and the default --help shows.
template <class F>
std::string shown(F v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

UsageError bad(const char* name, const std::string& rule, const std::string& value) {
  return UsageError(std::string("--") + name + " must be " + rule + ", not " + value);
}

// [lo, hi], or (lo, hi] when lo_open; hi infinite: no upper end.
struct Bounds {
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool lo_open = false;

  bool holds(double v) const { return std::isfinite(v) && (lo_open ? v > lo : v >= lo) && v <= hi; }
  std::string words() const {
    if (std::isinf(hi)) return (lo_open ? "> " : ">= ") + shown(lo);
    return "between " + shown(static_cast<int64_t>(lo)) + " and " + shown(static_cast<int64_t>(hi));
  }
};
const Bounds kAny;
Bounds at_least(double lo) { return {lo, std::numeric_limits<double>::infinity(), false}; }
Bounds above(double lo) { return {lo, std::numeric_limits<double>::infinity(), true}; }
Bounds between(double lo, double hi) { return {lo, hi, false}; }

Row text(const char* name, OptionGroup g, const char* help, const char* record,
         Member<std::string> m) {
  Row r{name};
  r.group = g;
  r.help = help;
  r.record = record;
  r.get = [m](const TrainConfig& c) { return read(m, c); };
  r.set = [m](TrainConfig& c, const std::string& v) { m(c) = v; };
  return r;
}

// A number of the member's type. Text is parsed whole (a count refuses "1.5", and "-1" is refused
// by the bounds instead of wrapping), and must fit the member's type.
template <class F>
Row number(const char* name, OptionGroup g, const char* help, const char* record, Member<F> m,
           Bounds b) {
  Row r{name};
  r.group = g;
  r.help = help;
  r.record = record;
  r.get = [m](const TrainConfig& c) { return shown(read(m, c)); };
  const bool ruled = !std::isinf(b.lo) || !std::isinf(b.hi);
  if (ruled)
    r.check = [name, m, b](const TrainConfig& c) {
      const F v = read(m, c);
      if (!b.holds(static_cast<double>(v))) throw bad(name, b.words(), shown(v));
    };
  r.set = [name, m, b, ruled](TrainConfig& c, const std::string& v) {
    char* end = nullptr;
    errno = 0;
    if constexpr (std::is_integral_v<F>) {
      const long long n = std::strtoll(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || errno != 0) throw bad(name, "a whole number", "'" + v + "'");
      if (ruled && !b.holds(static_cast<double>(n))) throw bad(name, b.words(), v);
      using Limits = std::numeric_limits<F>;
      if (static_cast<double>(n) < static_cast<double>(Limits::min()) ||
          static_cast<double>(n) > static_cast<double>(Limits::max()))
        throw bad(name,
                  "between " + shown(std::isinf(b.lo) ? +Limits::min() : static_cast<F>(b.lo)) +
                      " and " + shown(+Limits::max()),
                  v);
      m(c) = static_cast<F>(n);
    } else {
      const double d = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || errno != 0) throw bad(name, "a number", "'" + v + "'");
      if (ruled && !b.holds(d)) throw bad(name, b.words(), v);
      m(c) = static_cast<F>(d);
    }
  };
  return r;
}

template <class E>
Row choice(const char* name, OptionGroup g, const char* help, const char* record, Member<E> m,
           E (*parse)(const std::string&), const char* (*name_of)(E)) {
  Row r{name};
  r.group = g;
  r.help = help;
  r.record = record;
  r.get = [m, name_of](const TrainConfig& c) { return std::string(name_of(read(m, c))); };
  r.set = [m, parse](TrainConfig& c, const std::string& v) { m(c) = parse(v); };
  return r;
}

Row on_off(const char* name, OptionGroup g, const char* help, const char* record, Member<bool> m) {
  Row r{name};
  r.group = g;
  r.help = help;
  r.record = record;
  r.is_switch = true;
  r.get = [m](const TrainConfig& c) { return shown(read(m, c)); };
  r.set = [m](TrainConfig& c, const std::string& v) { m(c) = v == "1" || v == "true"; };
  return r;
}

Precision parse_compute_precision(const std::string& v) {
  return parse_precision(v, "--precision");
}
Precision parse_reduce_precision(const std::string& v) {
  return parse_precision(v, "--grad-reduce-dtype");
}
const char* lr_scaling_name(LrScaling s) { return s == LrScaling::linear ? "linear" : "none"; }

std::vector<Row> build() {
  using G = OptionGroup;
  std::vector<Row> t;
  Row data = text(
      "data", G::data,
      "required: HDF5 dataset file, or a dataset name (fashion-mnist) looked up as "
      "$LOCKSTEP_DATA_DIR/<name>.h5, then data/<name>.h5",
      "data", +[](TrainConfig & c) -> auto& { return c.train.path; });
  data.required = true;
  t.push_back(data);
  t.push_back(text(
      "train-group", G::data, "group of the training split", "group",
      +[](TrainConfig & c) -> auto& { return c.train.group; }));
  t.push_back(text(
      "test-group", G::data, "group of the evaluation split", "test_group",
      +[](TrainConfig & c) -> auto& { return c.test_group; }));
  t.push_back(text(
      "x-name", G::data, "input dataset (default: images, else x)", nullptr,
      +[](TrainConfig & c) -> auto& { return c.train.x_name; }));
  t.push_back(text(
      "y-name", G::data,
      "target dataset (default: labels beside images, y beside x; else labels if present, else y)",
      nullptr, +[](TrainConfig & c) -> auto& { return c.train.y_name; }));
  Row rem{"remainder"};
  rem.group = G::data;
  rem.help = "last partial global batch: mask (kept, padding weighted 0) or drop";
  rem.get = [](const TrainConfig& c) { return std::string(c.drop_remainder ? "drop" : "mask"); };
  rem.set = [](TrainConfig& c, const std::string& v) {
    if (v != "mask" && v != "drop")
      throw UsageError("--remainder must be mask or drop, not '" + v + "'");
    c.drop_remainder = v == "drop";
  };
  rem.record = "drop_remainder";
  rem.record_value = [](const TrainConfig& c) { return shown(c.drop_remainder); };
  t.push_back(rem);

  Row model = text(
      "model", G::model,
      "linear | mlp[:w1,w2,...] | cnn | gpt[:tiny|small][,layers=L,heads=H,dim=D,ctx=T,vocab=V] "
      "| a layer list such as conv3x3:32,relu,maxpool2,dense",
      "model", +[](TrainConfig & c) -> auto& { return c.model; });
  model.help_more = [] { return " (layers: " + layer_grammar() + ")"; };
  model.check = [](const TrainConfig& c) { parse_model_spec(c.model); };
  t.push_back(model);
  t.push_back(choice<LossKind>(
      "loss", G::model,
      "auto (cross-entropy for labels, mse for float targets) | "
      "cross-entropy | mse",
      "loss", +[](TrainConfig & c) -> auto& { return c.loss; }, parse_loss, loss_name));

  t.push_back(choice<OptimizerKind>(
      "optimizer", G::optimizer, "sgd | momentum | adam | adamw", "optimizer",
      +[](TrainConfig & c) -> auto& { return c.optimizer.kind; }, parse_optimizer, optimizer_name));
  t.push_back(number<double>(
      "lr", G::optimizer, "peak learning rate", "lr",
      +[](TrainConfig & c) -> auto& { return c.lr; }, above(0)));
  t.push_back(number<float>(
      "momentum", G::optimizer, "momentum: momentum factor", "momentum",
      +[](TrainConfig & c) -> auto& { return c.optimizer.momentum; }, kAny));
  t.push_back(on_off(
      "nesterov", G::optimizer, "momentum: Nesterov momentum", "nesterov",
      +[](TrainConfig & c) -> auto& { return c.optimizer.nesterov; }));
  t.push_back(number<float>(
      "beta1", G::optimizer, "adam, adamw: first-moment decay", "beta1",
      +[](TrainConfig & c) -> auto& { return c.optimizer.beta1; }, kAny));
  t.push_back(number<float>(
      "beta2", G::optimizer, "adam, adamw: second-moment decay", "beta2",
      +[](TrainConfig & c) -> auto& { return c.optimizer.beta2; }, kAny));
  t.push_back(number<float>(
      "eps", G::optimizer, "adam, adamw: epsilon", "eps",
      +[](TrainConfig & c) -> auto& { return c.optimizer.eps; }, kAny));
  t.push_back(number<float>(
      "weight-decay", G::optimizer,
      "L2 on every gradient (sgd, momentum, adam); adamw: decoupled decay of weight matrices and "
      "embeddings only (not biases or norm gains)",
      "weight_decay", +[](TrainConfig & c) -> auto& { return c.optimizer.weight_decay; }, kAny));
  t.push_back(number<double>(
      "clip-norm", G::optimizer, "clip the averaged gradient to this global L2 norm (0: off)",
      "clip_norm", +[](TrainConfig & c) -> auto& { return c.clip_norm; }, at_least(0)));
  t.push_back(choice<LrScheduleKind>(
      "lr-schedule", G::optimizer, "constant | cosine | linear (decay to --min-lr over the run)",
      "lr_schedule", +[](TrainConfig & c) -> auto& { return c.lr_schedule; }, parse_lr_schedule,
      lr_schedule_name));
  t.push_back(number<int64_t>(
      "warmup-steps", G::optimizer,
      "linear warm-up from 0 over this many steps, before any schedule", "warmup_steps",
      +[](TrainConfig & c) -> auto& { return c.warmup_steps; }, at_least(0)));
  t.push_back(number<double>(
      "min-lr", G::optimizer, "cosine, linear: final learning rate", "min_lr",
      +[](TrainConfig & c) -> auto& { return c.min_lr; }, at_least(0)));
  t.push_back(choice<LrScaling>(
      "lr-scaling", G::optimizer, "none | linear (peak lr = --lr * global batch / --base-batch)",
      "lr_scaling", +[](TrainConfig & c) -> auto& { return c.lr_scaling; }, parse_lr_scaling,
      lr_scaling_name));
  t.push_back(number<int64_t>(
      "base-batch", G::optimizer, "batch size --lr is tuned for", "base_batch",
      +[](TrainConfig & c) -> auto& { return c.base_batch; }, above(0)));

  t.push_back(number<int64_t>(
      "global-batch", G::loop,
      "samples per update over all ranks; must divide by ranks x "
      "--grad-accum",
      "global_batch", +[](TrainConfig & c) -> auto& { return c.global_batch; }, above(0)));
  t.push_back(number<int>(
      "epochs", G::loop, "passes over the training split", "epochs",
      +[](TrainConfig & c) -> auto& { return c.epochs; }, between(0, 1'000'000)));
  t.push_back(number<int64_t>(
      "steps", G::loop, "stop after this many updates (0: use --epochs)", "steps",
      +[](TrainConfig & c) -> auto& { return c.steps; }, at_least(0)));
  t.push_back(number<int64_t>(
      "eval-every", G::loop,
      "also evaluate on --test-group every N updates, between epoch ends (0: at epoch ends "
      "only)",
      nullptr, +[](TrainConfig & c) -> auto& { return c.eval_every; }, at_least(0)));
  t.push_back(number<int64_t>(
      "eval-steps", G::loop,
      "evaluations read only the first N batches of --test-group, in file order (0: all of it)",
      "eval_steps", +[](TrainConfig & c) -> auto& { return c.eval_steps; }, at_least(0)));
  t.push_back(number<int>(
      "grad-accum", G::loop,
      "micro-batches per update (global batch / K each), one gradient "
      "all-reduce per update",
      "grad_accum", +[](TrainConfig & c) -> auto& { return c.grad_accum; }, at_least(1)));
  t.push_back(number<int>(
      "zero", G::runtime,
      "ZeRO stage: 0 every rank keeps the whole optimizer state; 1 each rank keeps the state of "
      "its 1/P of the parameters (gradients reduce-scattered, parameters all-gathered); 2 also "
      "only its 1/P of the reduced gradients",
      "zero", +[](TrainConfig & c) -> auto& { return c.zero; }, between(0, 2)));
  t.push_back(choice<GatherDtype>(
      "gather-dtype", G::runtime,
      "auto | fp32 | bf16: dtype of --zero's parameter all-gather (auto: --precision's). bf16 "
      "halves its bytes: every rank then computes with the parameters rounded to bf16, the fp32 "
      "master weights kept in the ranks' shards and saved in checkpoints",
      nullptr, +[](TrainConfig & c) -> auto& { return c.gather_dtype; }, parse_gather_dtype,
      gather_dtype_name));
  t.push_back(choice<Recompute>(
      "recompute", G::runtime,
      "none | gelu | blocks: what the GPT blocks compute again in the backward pass instead of "
      "keeping it from the forward pass (the GELU outputs; or everything but each block's "
      "input: about one more forward pass for a fraction of the activation memory)",
      nullptr, +[](TrainConfig & c) -> auto& { return c.recompute; }, parse_recompute,
      recompute_name));
  t.push_back(number<uint64_t>(
      "seed", G::loop, "seed of the initial parameters and the shuffles", "seed",
      +[](TrainConfig & c) -> auto& { return c.seed; }, at_least(0)));
  t.push_back(number<int>(
      "prefetch", G::loop, "batches the loader reads ahead", nullptr,
      +[](TrainConfig & c) -> auto& { return c.prefetch; }, at_least(1)));
  t.push_back(number<int64_t>(
      "data-in-memory-mb", G::data,
      "read a split of at most this many MiB (as stored) whole into memory once, on every "
      "rank, instead of each batch's rows from the file (0: never)",
      nullptr, +[](TrainConfig & c) -> auto& { return c.data_in_memory_mb; },
      between(0, 1073741824.0)));

  t.push_back(number<int64_t>(
      "log-every", G::output,
      "steps between progress reports (loss and accuracy reduced over "
      "ranks)",
      nullptr, +[](TrainConfig & c) -> auto& { return c.log_every; }, at_least(1)));
  t.push_back(text(
      "metrics", G::output, "write metrics as JSON lines to this file", nullptr,
      +[](TrainConfig & c) -> auto& { return c.metrics_path; }));
  t.push_back(number<int64_t>(
      "sample-every", G::output,
      "a GPT on token data: every N steps print text sampled from the model after "
      "--sample-prompt (0: never)",
      nullptr, +[](TrainConfig & c) -> auto& { return c.sample_every; }, at_least(0)));
  t.push_back(number<int>(
      "sample-bytes", G::output, "tokens each --sample-every sample holds", nullptr,
      +[](TrainConfig & c) -> auto& { return c.sample_bytes; }, at_least(1)));
  t.push_back(text(
      "sample-prompt", G::output, "the text each --sample-every sample continues", nullptr,
      +[](TrainConfig & c) -> auto& { return c.sample_prompt; }));
  t.push_back(number<int64_t>(
      "straggler-every", G::output,
      "steps between straggler reports: per-rank step times, the slowest "
      "rank (0: none)",
      nullptr, +[](TrainConfig & c) -> auto& { return c.straggler_every; }, at_least(0)));

  t.push_back(choice<Precision>(
      "precision", G::runtime,
      "fp32 | bf16 (bf16 GEMMs with fp32 master weights; needs --device "
      "cuda)",
      nullptr, +[](TrainConfig & c) -> auto& { return c.precision; }, parse_compute_precision,
      precision_name));
  t.push_back(choice<Precision>(
      "grad-reduce-dtype", G::runtime,
      "fp32 | bf16: dtype of the gradient all-reduce (bf16 halves the "
      "bytes, rounds the sums; over NCCL every partial sum rounds, an error that grows with the "
      "ranks)",
      nullptr, +[](TrainConfig & c) -> auto& { return c.grad_reduce_dtype; },
      parse_reduce_precision, precision_name));
  Row bucket = number<double>(
      "bucket-mb", G::runtime,
      "gradient all-reduce bucket size in MiB, reduced in reverse layer "
      "order during backward (0: one all-reduce after backward)",
      nullptr, +[](TrainConfig & c) -> auto& { return c.bucket_mb; }, kAny);
  bucket.check = [](const TrainConfig& c) { bucket_bytes_from_mb(c.bucket_mb); };
  t.push_back(bucket);
  Row graphs{"cuda-graphs"};
  graphs.group = G::runtime;
  graphs.help =
      "on | off: with --device cuda, capture each full training step in a CUDA graph and replay "
      "it (one launch per step)";
  graphs.get = [](const TrainConfig& c) { return std::string(c.cuda_graphs ? "on" : "off"); };
  graphs.set = [](TrainConfig& c, const std::string& v) {
    if (v != "on" && v != "off")
      throw UsageError("--cuda-graphs must be on or off, not '" + v + "'");
    c.cuda_graphs = v == "on";
  };
  t.push_back(graphs);
  t.push_back(number<int64_t>(
      "check-every", G::runtime, "steps between replica checksum checks (0: only at start and end)",
      nullptr, +[](TrainConfig & c) -> auto& { return c.check_every; }, at_least(0)));

  // Their rules are validate(GuardOptions)'s (step_guard.h): kAny here.
  t.push_back(text(
      "checkpoint-dir", G::faults,
      "write checkpoints (HDF5, ckpt-<step>.h5) to this folder: every "
      "--checkpoint-every steps, at the end, and when SIGTERM/SIGINT/SIGUSR1 stops "
      "the run",
      nullptr, +[](TrainConfig & c) -> auto& { return c.guard.checkpoint_dir; }));
  t.push_back(number<int64_t>(
      "checkpoint-every", G::faults,
      "steps between checkpoints (0: only at the end and on a stop signal)", nullptr,
      +[](TrainConfig & c) -> auto& { return c.guard.checkpoint_every; }, kAny));
  t.push_back(number<int>(
      "keep-checkpoints", G::faults, "newest checkpoints kept in --checkpoint-dir (0: keep all)",
      nullptr, +[](TrainConfig & c) -> auto& { return c.guard.keep_checkpoints; }, kAny));
  t.push_back(number<double>(
      "checkpoint-timeout", G::faults,
      "seconds every rank waits for rank 0 to write a checkpoint before the "
      "job fails (0: --timeout plus 1 s per 10 MB of checkpoint)",
      nullptr, +[](TrainConfig & c) -> auto& { return c.guard.checkpoint_timeout; }, kAny));
  t.push_back(choice<NanPolicy>(
      "on-nan", G::faults,
      "a NaN/Inf loss or gradient: stop (exit 2 naming the step) | skip "
      "(drop that update)",
      nullptr, +[](TrainConfig & c) -> auto& { return c.guard.on_nan; }, parse_nan_policy,
      nan_policy_name));
  return t;
}

}  // namespace

const std::vector<OptionRow<TrainConfig>>& train_config_options() {
  static const std::vector<Row> rows = build();
  return rows;
}

void check_config_options(const TrainConfig& c) {
  for (const Row& r : train_config_options())
    if (r.check) r.check(c);
}

std::string config_record(const TrainConfig& c) {
  std::string out;
  for (const Row& r : train_config_options())
    if (r.record)
      out += std::string(r.record) + "=" + (r.record_value ? r.record_value(c) : r.get(c)) + "\n";
  return out + "shuffle=" + shown(c.shuffle) + "\n";
}

}  // namespace lockstep
