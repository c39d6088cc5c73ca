#include "apps/train_options.h"

#include <boost/program_options.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "apps/train_faults.h"
#include "runtime/buckets.h"
#include "runtime/error.h"

namespace lockstep {

namespace po = boost::program_options;

namespace {

// Values parsed as signed or text first, so "-1" for a count is refused in words instead of
// wrapping around, and float defaults print as written.
struct Raw {
  std::string config, data, train_group, test_group, x_name, y_name, model, loss, optimizer;
  std::string lr_schedule, lr_scaling, remainder, metrics, device, comm, progress;
  std::string precision, grad_reduce_dtype;
  double bucket_mb = 0;
  std::string trace;
  int64_t straggler_every = 0;
  double lr = 0, momentum = 0, beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0, clip_norm = 0;
  double min_lr = 0, timeout = 0;
  int64_t warmup_steps = 0, base_batch = 0, global_batch = 0, epochs = 0, steps = 0;
  int64_t grad_accum = 0, seed = 0, log_every = 0, check_every = 0, threads = 0, prefetch = 0;
  bool nesterov = false, verbose = false;
  FaultRaw fault;
};

po::options_description describe(Raw& r) {
  po::options_description general("General");
  general.add_options()
      ("help,h", "print this list of options and exit")
      ("config", po::value(&r.config)->default_value("", "\"\""),
       "INI file of option=value lines (long names, no dashes); command-line values win");
  po::options_description data("Data");
  data.add_options()
      ("data", po::value(&r.data),
       "required: HDF5 dataset file, or a dataset name (fashion-mnist) looked up as "
       "$LOCKSTEP_DATA_DIR/<name>.h5, then data/<name>.h5")
      ("train-group", po::value(&r.train_group)->default_value("train"), "group of the training split")
      ("test-group", po::value(&r.test_group)->default_value("test"), "group of the evaluation split")
      ("x-name", po::value(&r.x_name)->default_value("", "\"\""), "input dataset (default: images, else x)")
      ("y-name", po::value(&r.y_name)->default_value("", "\"\""), "target dataset (default: labels, else y)")
      ("remainder", po::value(&r.remainder)->default_value("mask"),
       "last partial global batch: mask (kept, padding weighted 0) or drop");
  po::options_description model("Model and loss");
  model.add_options()
      ("model", po::value(&r.model)->default_value("cnn"),
       "linear | mlp[:w1,w2,...] | cnn | a layer list such as conv3x3:32,relu,maxpool2,dense "
       "(layers: dense[:units], convKxK:channels[:stride], maxpoolK, relu, flatten)")
      ("loss", po::value(&r.loss)->default_value("auto"),
       "auto (cross-entropy for labels, mse for float targets) | cross-entropy | mse");
  po::options_description opt("Optimizer and learning rate");
  opt.add_options()
      ("optimizer", po::value(&r.optimizer)->default_value("adam"), "sgd | momentum | adam | adamw")
      ("lr", po::value(&r.lr)->default_value(1e-3, "0.001"), "peak learning rate")
      ("momentum", po::value(&r.momentum)->default_value(0.9, "0.9"), "momentum: momentum factor")
      ("nesterov", po::bool_switch(&r.nesterov), "momentum: Nesterov momentum")
      ("beta1", po::value(&r.beta1)->default_value(0.9, "0.9"), "adam, adamw: first-moment decay")
      ("beta2", po::value(&r.beta2)->default_value(0.999, "0.999"), "adam, adamw: second-moment decay")
      ("eps", po::value(&r.eps)->default_value(1e-8, "1e-8"), "adam, adamw: epsilon")
      ("weight-decay", po::value(&r.weight_decay)->default_value(0.0, "0"),
       "L2 on the gradient (sgd, momentum, adam) or decoupled decay (adamw)")
      ("clip-norm", po::value(&r.clip_norm)->default_value(0.0, "0"),
       "clip the averaged gradient to this global L2 norm (0: off)")
      ("lr-schedule", po::value(&r.lr_schedule)->default_value("constant"),
       "constant | cosine | linear (decay to --min-lr over the run)")
      ("warmup-steps", po::value(&r.warmup_steps)->default_value(0),
       "linear warm-up from 0 over this many steps, before any schedule")
      ("min-lr", po::value(&r.min_lr)->default_value(0.0, "0"), "cosine, linear: final learning rate")
      ("lr-scaling", po::value(&r.lr_scaling)->default_value("none"),
       "none | linear (peak lr = --lr * global batch / --base-batch)")
      ("base-batch", po::value(&r.base_batch)->default_value(256), "batch size --lr is tuned for");
  po::options_description loop("Training loop");
  loop.add_options()
      ("global-batch", po::value(&r.global_batch)->default_value(128),
       "samples per update over all ranks; must divide by ranks x --grad-accum")
      ("epochs", po::value(&r.epochs)->default_value(5), "passes over the training split")
      ("steps", po::value(&r.steps)->default_value(0), "stop after this many updates (0: use --epochs)")
      ("grad-accum", po::value(&r.grad_accum)->default_value(1),
       "micro-batches per update (global batch / K each), one gradient all-reduce per update")
      ("seed", po::value(&r.seed)->default_value(0), "seed of the initial parameters and the shuffles")
      ("prefetch", po::value(&r.prefetch)->default_value(2), "batches the loader reads ahead");
  po::options_description out("Output");
  out.add_options()
      ("log-every", po::value(&r.log_every)->default_value(50),
       "steps between progress reports (loss and accuracy reduced over ranks)")
      ("metrics", po::value(&r.metrics)->default_value("", "\"\""), "write metrics as JSON lines to this file")
      ("trace", po::value(&r.trace)->default_value("", "\"\""),
       "write a Chrome trace-event JSON (chrome://tracing, Perfetto) of every rank to this file")
      ("straggler-every", po::value(&r.straggler_every)->default_value(100),
       "steps between straggler reports: per-rank step times, the slowest rank (0: none)")
      ("progress", po::value(&r.progress)->default_value("auto"),
       "auto (a bar on a terminal, else lines) | bar | lines | none")
      ("verbose,v", po::bool_switch(&r.verbose),
       "log details on stderr: the launcher, MPI and GPU slot line at start-up, debug messages "
       "(as LOCKSTEP_LOG_LEVEL=debug)");
  po::options_description run("Runtime");
  run.add_options()
      ("device", po::value(&r.device)->default_value("auto"), "cpu | cuda | auto")
      ("comm", po::value(&r.comm)->default_value("auto"), "auto (nccl on cuda, mpi on cpu) | mpi | nccl")
      ("precision", po::value(&r.precision)->default_value("fp32"),
       "fp32 | bf16 (bf16 GEMMs with fp32 master weights; needs --device cuda)")
      ("grad-reduce-dtype", po::value(&r.grad_reduce_dtype)->default_value("fp32"),
       "fp32 | bf16: dtype of the gradient all-reduce (bf16 halves the bytes, rounds the sums)")
      ("bucket-mb", po::value(&r.bucket_mb)->default_value(25.0, "25"),
       "gradient all-reduce bucket size in MiB, reduced in reverse layer order during backward "
       "(0: one all-reduce after backward)")
      ("timeout", po::value(&r.timeout)->default_value(60.0, "60"),
       "seconds a collective may take before the job fails")
      ("check-every", po::value(&r.check_every)->default_value(100),
       "steps between replica checksum checks (0: only at start and end)")
      ("threads", po::value(&r.threads)->default_value(0),
       "BLAS threads per rank (0: cores / ranks on this host)");
  po::options_description all("lockstep-train options");
  all.add(general).add(data).add(model).add(opt).add(loop).add(out).add(run);
  all.add(fault_options(r.fault));
  return all;
}

template <class T>
T positive_int(int64_t v, const char* name) {
  if (v <= 0) throw UsageError(std::string("--") + name + " must be positive, not " + std::to_string(v));
  return static_cast<T>(v);
}

}  // namespace

TrainOptions parse_train_options(int argc, char** argv) {
  Raw r;
  po::options_description all = describe(r);
  TrainOptions o;
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, all), vm);
    if (vm.count("help")) {
      std::ostringstream os;
      os << "usage: [mpiexec -n P] lockstep-train --data FILE|NAME [options]\n\n" << all;
      o.help = true;
      o.help_text = os.str();
      return o;
    }
    if (vm.count("config") && !vm["config"].as<std::string>().empty()) {
      const std::string path = vm["config"].as<std::string>();
      std::ifstream in(path);
      if (!in) throw UsageError("--config: cannot read '" + path + "'");
      try {
        po::store(po::parse_config_file(in, all), vm);
      } catch (const po::error& e) {
        throw UsageError("--config " + path + ": " + e.what());
      }
    }
    po::notify(vm);
  } catch (const po::error& e) {
    throw UsageError(std::string(e.what()) + " (see lockstep-train --help)");
  }

  if (r.data.empty()) throw UsageError("--data is required: an HDF5 file or a dataset name");
  o.data = r.data;
  TrainConfig& c = o.config;
  c.train.path = resolve_data_path(r.data);
  c.train.group = r.train_group;
  c.train.x_name = r.x_name;
  c.train.y_name = r.y_name;
  c.test_group = r.test_group;
  c.model = r.model;
  c.loss = parse_loss(r.loss);
  c.optimizer.kind = parse_optimizer(r.optimizer);
  c.optimizer.momentum = static_cast<float>(r.momentum);
  c.optimizer.nesterov = r.nesterov;
  c.optimizer.beta1 = static_cast<float>(r.beta1);
  c.optimizer.beta2 = static_cast<float>(r.beta2);
  c.optimizer.eps = static_cast<float>(r.eps);
  c.optimizer.weight_decay = static_cast<float>(r.weight_decay);
  c.clip_norm = r.clip_norm;
  c.lr = r.lr;
  c.lr_schedule = parse_lr_schedule(r.lr_schedule);
  c.warmup_steps = r.warmup_steps;
  c.min_lr = r.min_lr;
  c.lr_scaling = parse_lr_scaling(r.lr_scaling);
  c.base_batch = r.base_batch;
  c.global_batch = r.global_batch;
  if (r.epochs < 0 || r.epochs > 1'000'000)
    throw UsageError("--epochs must be between 1 and 1000000, not " + std::to_string(r.epochs));
  c.epochs = static_cast<int>(r.epochs);
  c.steps = r.steps;
  c.grad_accum = positive_int<int>(r.grad_accum, "grad-accum");
  if (r.seed < 0) throw UsageError("--seed must be >= 0, not " + std::to_string(r.seed));
  c.seed = static_cast<uint64_t>(r.seed);
  c.prefetch = positive_int<int>(r.prefetch, "prefetch");
  if (r.remainder != "mask" && r.remainder != "drop")
    throw UsageError("--remainder must be mask or drop, not '" + r.remainder + "'");
  c.drop_remainder = r.remainder == "drop";
  c.log_every = r.log_every;
  c.check_every = r.check_every;
  c.metrics_path = r.metrics;
  c.straggler_every = r.straggler_every;
  o.trace = r.trace;
  o.verbose = r.verbose;
  if (r.progress != "auto" && r.progress != "bar" && r.progress != "lines" && r.progress != "none")
    throw UsageError("--progress must be auto, bar, lines or none, not '" + r.progress + "'");
  o.progress = r.progress;
  if (r.device != "cpu" && r.device != "cuda" && r.device != "auto")
    throw UsageError("--device must be cpu, cuda or auto, not '" + r.device + "'");
  o.device = r.device;
  if (r.comm != "auto" && r.comm != "mpi" && r.comm != "nccl")
    throw UsageError("--comm must be auto, mpi or nccl, not '" + r.comm + "'");
  o.comm = r.comm;
  c.precision = parse_precision(r.precision, "--precision");
  c.grad_reduce_dtype = parse_precision(r.grad_reduce_dtype, "--grad-reduce-dtype");
  c.bucket_mb = r.bucket_mb;
  bucket_bytes_from_mb(r.bucket_mb);
  if (!(r.timeout > 0 && r.timeout <= 86400))
    throw UsageError("--timeout must be a number of seconds in (0, 86400], not " +
                     std::to_string(r.timeout));
  o.timeout_seconds = r.timeout;
  if (r.threads < 0 || r.threads > 1024)
    throw UsageError("--threads must be between 0 (automatic) and 1024, not " +
                     std::to_string(r.threads));
  o.threads = static_cast<int>(r.threads);
  apply_fault_options(r.fault, c.guard, o.resume);
  return o;
}

std::string resolve_data_path(const std::string& data) {
  std::error_code ec;
  if (std::filesystem::exists(data, ec)) return data;
  bool looks_like_name = data.find('/') == std::string::npos &&
                         data.find('.') == std::string::npos;
  if (!looks_like_name) throw UsageError("--data: no such file '" + data + "'");
  std::vector<std::string> tried;
  if (const char* dir = std::getenv("LOCKSTEP_DATA_DIR"); dir && *dir)
    tried.push_back(std::string(dir) + "/" + data + ".h5");
  tried.push_back("data/" + data + ".h5");
  for (const std::string& p : tried)
    if (std::filesystem::exists(p, ec)) return p;
  std::string where;
  for (const std::string& p : tried) where += (where.empty() ? "" : " or ") + p;
  throw UsageError("--data " + data + ": neither a file nor found as " + where +
                   " (create it with: lockstep-data " + data + " --out " + tried.back() + ")");
}

}  // namespace lockstep
