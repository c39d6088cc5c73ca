// lockstep-bench train: where a training step's time goes, and how close it runs to the machine.
//
// Runs the real Trainer for --warmup + --steps updates on synthetic Fashion-MNIST-shaped data
// (28x28x1 uint8 images, 10 classes, written by every rank to its own temporary HDF5 file, so no
// shared folder is needed) or on --data FILE. The phase hook gives each rank's step times and
// phases; a step's time is the slowest rank's (the all-reduce makes every rank wait for it).
// Prints, from rank 0, key=value lines: steady-state samples/s (global batch over the mean step
// time, and over the median), step time median/min/max, the
// share of each phase, the model's FLOPs per sample (counted from the layer shapes: conv
// 2*out_h*out_w*c_out*k*k*c_in, dense 2*in*out, x3 for a training step), the achieved FLOP/s and
// its share of the peak. The peak is measured in the same run (bench_peak.h), on every rank at once
// and summed over the ranks: on the CPU the fastest of the build's GEMM and convolution kernels
// (OpenBLAS sgemm and oneDNN matmul at 2048^3, --peak-size; oneDNN convolution at the CNN's conv2
// shape, on NHWC and in 16-channel blocks with oneDNN's algorithm: Winograd on AVX-512, counted
// as the direct algorithm's FLOPs; the convolutions only for a model with convolution layers)
// with the rank's threads, named in the output;
// on a GPU (--device cuda) a cuBLAS 8192^3 GEMM in the step's precision (--precision: fp32, or
// bf16 with fp32 accumulation, then the fp32 rate is printed too), timed by CUDA events.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "apps/bench_args.h"
#include "apps/bench_commands.h"
#include "apps/bench_peak.h"
#include "apps/bench_setup.h"
#include "apps/train_options.h"
#include "kernels/cuda/memory.h"
#include "kernels/onednn/onednn.h"
#include "runtime/base/error.h"
#include "runtime/base/knobs.h"
#include "runtime/base/precision.h"
#include "runtime/data/synthetic.h"
#include "runtime/model/layer_registry.h"
#include "runtime/process/blas_threads.h"
#include "runtime/process/context.h"
#include "runtime/train/trainer.h"

namespace lockstep::bench {

namespace {

namespace po = boost::program_options;

// The options this benchmark shares with lockstep-train, taken from its table: the same help,
// defaults and refusals (train_options.h).
const std::vector<std::string> kTrainOptions = {
    "model",   "global-batch", "device",       "precision", "data-in-memory-mb",
    "threads", "optimizer",    "weight-decay", "clip-norm", "cuda-graphs",
    "zero",    "gather-dtype", "recompute"};

struct Options {
  TrainOptions train;  // kTrainOptions
  std::string data;    // empty: synthetic
  int64_t steps = 30, warmup = 5;
  int peak_size = 0;  // 0: kHostPeakSize or kDevicePeakSize
};

// A GPU needs a larger product than a CPU core group to run near its peak.
constexpr int kHostPeakSize = 2048, kDevicePeakSize = 8192;

bool parse(int argc, char** argv, const World& world, Options* o) {
  po::options_description desc("lockstep-bench train [options]");
  // clang-format off
  desc.add_options()
      ("help,h", "show this help")
      ("steps", po::value(&o->steps)->default_value(30), "timed steps")
      ("warmup", po::value(&o->warmup)->default_value(5), "untimed steps first")
      ("data", po::value(&o->data)->default_value("", "\"\""),
       "HDF5 dataset file (lockstep-data); default: synthetic 28x28x1 images, 10 classes, or for "
       "a language model (--model gpt...) random bytes in sequences of its context")
      ("peak-size", po::value(&o->peak_size)->default_value(0),
       "n of the n^3 GEMM that measures the peak (0: 2048 on the CPU, 8192 on a GPU)");
  // clang-format on
  if (!parse_with_train_options("train", argc, argv, world, desc, kTrainOptions, o->train))
    return false;
  if (o->steps < 1) throw UsageError("--steps must be 1 or more");
  if (o->warmup < 0) throw UsageError("--warmup must be 0 or more");
  check_peak_size(o->peak_size);
  return true;
}

// For a language model (a spec starting with 'embed', as the gpt preset does): sequences of T + 1
// random tokens (lockstep-data text's layout), T the model's context: bytes, or ids below the
// vocabulary the spec pins (gpt:...,vocab=V; int32 then). Random text cannot be learnt past
// log2(V) bits per token; the speed does not depend on it.
struct LanguageModel {
  int ctx = 0;  // 0: not a language model
  int vocab = 256;
};
LanguageModel language_model(const std::string& model) {
  const ModelSpec spec = parse_model_spec(model);
  if (spec.layers.empty() || spec.layers[0].type != "embed") return {};
  const std::vector<int>& a = spec.layers[0].args;
  return {a[1], a.size() > 2 ? a[2] : 256};
}

// Forward FLOPs per sample of the matrix work (conv, dense); relu and pooling are left out.
double forward_flops_per_sample(const Model& model) {
  double flops = 0;
  for (const LayerPlan& p : model.plan()) {
    const LayerType& type = find_layer_type(p.spec.type);
    if (type.forward_flops) flops += type.forward_flops(p);
  }
  return flops;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Per step of this rank: its wall time and the time of each phase.
struct StepLog {
  std::vector<double> total;
  std::vector<double> phase[5];
  double step_begin = -1;
  double current[5] = {0, 0, 0, 0, 0};

  void on_phase(Phase p, double begin, double end) {
    if (step_begin < 0) step_begin = begin;
    current[static_cast<int>(p)] += end - begin;
    if (p != Phase::optimizer) return;
    total.push_back(end - step_begin);
    for (int i = 0; i < 5; ++i) {
      phase[i].push_back(current[i]);
      current[i] = 0;
    }
    step_begin = -1;
  }
};

}  // namespace

int run_train_bench(int argc, char** argv, const World& world) {
  Options o;
  if (!parse(argc, argv, world, &o)) return 0;
  const TrainConfig& given = o.train.config;
  const Precision precision = given.precision;
  // The trainer, the step times and the peak rates use the world's host communicator, the
  // gradients ctx.grads.
  BenchContext bench = make_bench_context(world, o.train);
  Context& ctx = bench.ctx;
  Communicator& host = *ctx.host;
  const int threads = bench.threads;

  const int64_t total_steps = o.warmup + o.steps;
  const int64_t global_batch = given.global_batch;
  std::string path = o.data;
  std::string temp;
  if (path.empty()) {
    // Each rank its own file: ranks on other hosts need no shared folder.
    temp = (std::filesystem::temp_directory_path() /
            ("lockstep-bench-train-" + std::to_string(getpid()) + "-" + std::to_string(world.rank) +
             ".h5"))
               .string();
    const int64_t rows = std::max<int64_t>(global_batch, 1) * std::min<int64_t>(total_steps, 8);
    if (const LanguageModel lm = language_model(given.model); lm.ctx > 0)
      write_synthetic_tokens(temp, rows, std::max<int64_t>(global_batch, 1), lm.ctx, lm.vocab);
    else
      write_synthetic_images(temp, rows, std::max<int64_t>(global_batch, 1));
    path = temp;
  }
  struct Cleanup {
    std::string path;
    ~Cleanup() {
      if (!path.empty()) std::filesystem::remove(path);
    }
  } cleanup{temp};

  TrainConfig c = given;  // the shared options as given, the benchmark's settings below
  c.train.path = path;
  c.steps = total_steps;
  c.eval_every_epoch = false;
  c.eval_at_end = false;  // not timed, but an ncu profile of the run would count it
  c.log_every = total_steps + 1;
  c.check_every = 0;
  c.straggler_every = 0;
  c.print = false;
  c.device = ctx.device;  // the same device step as lockstep-train
  Trainer trainer(host, *ctx.grads, c);
  StepLog log;
  trainer.set_phase_hook([&log](Phase p, double b, double e) { log.on_phase(p, b, e); });
  trainer.run();

  // Timed steps only; a step's time is the slowest rank's.
  const size_t first = static_cast<size_t>(o.warmup);
  if (log.total.size() != static_cast<size_t>(total_steps))
    throw Error("lockstep-bench train: saw " + std::to_string(log.total.size()) +
                " steps, expected " + std::to_string(total_steps));
  std::vector<double> step(log.total.begin() + first, log.total.end());
  host.all_reduce(step.data(), step.data(), step.size(), DType::f64, ReduceOp::max);
  // Phase shares: each rank's phase sums over its own step time, averaged over the ranks.
  double sums[6] = {0, 0, 0, 0, 0, 0};
  for (size_t s = first; s < log.total.size(); ++s) {
    for (int i = 0; i < 5; ++i) sums[i] += log.phase[i][s];
    sums[5] += log.total[s];
  }
  host.all_reduce(sums, sums, 6, DType::f64, ReduceOp::mean);

  const double fwd = forward_flops_per_sample(trainer.model());
  const bool gpu = ctx.device == DeviceKind::cuda;
  // The training's peak, read before the GEMM rate measurement below allocates its own matrices.
  const size_t train_peak_bytes = gpu ? kernels::cuda_peak_allocated_bytes() : 0;
  // On the CPU, the largest resident set of any rank so far (getrusage: everything the process
  // holds, the data and MPI's buffers included), read before the peak's matrices too.
  double host_peak_mb = 0;
  if (!gpu) {
    rusage use{};
    getrusage(RUSAGE_SELF, &use);
    host_peak_mb = static_cast<double>(use.ru_maxrss) / 1024;  // Linux: KiB
    host.all_reduce(&host_peak_mb, &host_peak_mb, 1, DType::f64, ReduceOp::max);
  }
  const int peak_size = o.peak_size > 0 ? o.peak_size : gpu ? kDevicePeakSize : kHostPeakSize;
  // On the GPU: [0] the rate in the step's precision (the MFU's peak), [1] the fp32 rate.
  double rank_peak[2] = {0, 0};
  std::vector<KernelRate> candidates;
  std::string peak_kernel;
  if (!gpu) {
    // Each kernel's rate summed over the ranks; the peak is the fastest sum.
    // Convolution kernels are a peak for models that run them; a transformer's is the GEMMs'.
    bool convolutions = false;
    for (const LayerPlan& p : trainer.model().plan())
      convolutions = convolutions || p.spec.type == "conv";
    candidates = host_kernel_rates(host, peak_size, convolutions);
    std::vector<double> sums;
    for (const KernelRate& k : candidates) sums.push_back(k.rate);
    host.all_reduce(sums.data(), sums.data(), sums.size(), DType::f64, ReduceOp::sum);
    size_t best = 0;
    for (size_t i = 0; i < sums.size(); ++i) {
      candidates[i].rate = sums[i];
      if (sums[i] > sums[best]) best = i;
    }
    peak_kernel = candidates[best].name;
    rank_peak[0] = sums[best] / world.size;
  } else {
    rank_peak[0] = device_gemm_rate(host, peak_size, precision);
    rank_peak[1] = precision == Precision::fp32
                       ? rank_peak[0]
                       : device_gemm_rate(host, peak_size, Precision::fp32);
  }
  double peaks[2] = {rank_peak[0], rank_peak[1]};
  host.all_reduce(peaks, peaks, 2, DType::f64, ReduceOp::sum);
  const double peak = peaks[0];

  if (world.rank == 0) {
    double mean = 0;
    for (double s : step) mean += s;
    mean /= static_cast<double>(step.size());
    const double sps = static_cast<double>(global_batch) / mean;
    const double achieved = sps * 3 * fwd;
    const std::string data = !o.data.empty() ? "data " + o.data
                             : language_model(given.model).ctx > 0
                                 ? "synthetic random tokens"
                                 : "synthetic data (28x28x1, 10 classes)";
    if (gpu)
      std::printf(
          "# lockstep-bench train: model %s, global batch %lld, %d rank(s), device %s, "
          "precision %s, %s\n",
          given.model.c_str(), static_cast<long long>(global_batch), world.size,
          device_kind_name(ctx.device), precision_name(precision), data.c_str());
    else
      std::printf(
          "# lockstep-bench train: model %s, global batch %lld, %d rank(s), %d BLAS "
          "thread(s) per rank%s, device %s, %s\n",
          given.model.c_str(), static_cast<long long>(global_batch), world.size, threads,
          trainer.model().lanes() > 1 ? " (lanes: each over its own rows)" : "",
          device_kind_name(ctx.device), data.c_str());
    if (!gpu)
      std::printf("# CPU convolutions and dense layers on %s\n",
                  kernels::onednn_built() ? kernels::onednn_description() : "OpenBLAS");
    std::printf(
        "# %lld timed steps after %lld warm-up steps; a step's time is the slowest rank's\n",
        static_cast<long long>(o.steps), static_cast<long long>(o.warmup));
    if (gpu)
      std::printf("# CUDA graphs %s: %lld of %lld steps replayed from a graph\n",
                  c.cuda_graphs ? "on" : "off", static_cast<long long>(trainer.captured_steps()),
                  static_cast<long long>(total_steps));
    const Trainer::MemoryUse mem = trainer.memory_use();
    std::printf("# memory per rank: %s\n", trainer.memory_text().c_str());
    std::printf(
        "param_bytes=%llu grad_bytes=%llu optimizer_state_bytes=%llu master_bytes=%llu\n",
        static_cast<unsigned long long>(mem.params), static_cast<unsigned long long>(mem.grads),
        static_cast<unsigned long long>(mem.state), static_cast<unsigned long long>(mem.masters));
    if (mem.copy16 > 0)
      std::printf("bf16_copy_bytes=%llu\n", static_cast<unsigned long long>(mem.copy16));
    // Everything Lockstep allocated on the device at its peak while training (buffers,
    // activations, workspaces; kernels/cuda/memory.h), PyTorch's max_memory_allocated's
    // counterpart; the peak GEMM's matrices, allocated later, are not counted.
    if (gpu)
      std::printf("peak_device_memory_mb=%.0f\n",
                  static_cast<double>(train_peak_bytes) / (1 << 20));
    else
      std::printf("peak_host_memory_mb=%.0f\n", host_peak_mb);
    // The mean counts every stall; the median's rate is what a quiet machine sustains.
    std::printf("samples_per_second=%.1f samples_per_second_at_median=%.1f\n", sps,
                static_cast<double>(global_batch) / median(step));
    // A language model's samples are sequences: its rate in tokens (positions) too.
    const int positions = trainer.model().positions();
    if (positions > 1)
      std::printf("tokens_per_second=%.1f tokens_per_second_at_median=%.1f\n", sps * positions,
                  static_cast<double>(global_batch) * positions / median(step));
    std::printf("step_ms_median=%.3f step_ms_min=%.3f step_ms_max=%.3f step_ms_mean=%.3f\n",
                median(step) * 1e3, *std::min_element(step.begin(), step.end()) * 1e3,
                *std::max_element(step.begin(), step.end()) * 1e3, mean * 1e3);
    const double t = sums[5] > 0 ? sums[5] : 1;
    const double other = std::max(0.0, t - sums[0] - sums[1] - sums[2] - sums[3] - sums[4]);
    std::printf(
        "breakdown: data=%.1f%% forward=%.1f%% backward=%.1f%% comm=%.1f%% optimizer=%.1f%% "
        "other=%.1f%%\n",
        100 * sums[0] / t, 100 * sums[1] / t, 100 * sums[2] / t, 100 * sums[3] / t,
        100 * sums[4] / t, 100 * other / t);
    std::printf("flops_per_sample_forward=%.4g flops_per_sample_train=%.4g\n", fwd, 3 * fwd);
    std::printf("achieved_gflops=%.3f\n", achieved / 1e9);
    if (!gpu) {
      std::printf(
          "peak_gflops=%.3f (%s, %d thread(s) per rank, %.3f GFLOP/s per rank x %d "
          "rank(s) at once)\n",
          peak / 1e9, peak_kernel.c_str(), threads, rank_peak[0] / 1e9, world.size);
      std::printf("peak_candidates_gflops:");
      for (size_t i = 0; i < candidates.size(); ++i)
        std::printf("%s %s %.3f", i ? "," : "", candidates[i].name.c_str(),
                    candidates[i].rate / 1e9);
      std::printf(" (all ranks at once)\n");
    } else {
      std::printf(
          "peak_gflops=%.3f (cuBLAS %s GEMM %d^3%s on the GPU, timed by CUDA events, "
          "%.3f GFLOP/s per rank x %d rank(s) at once)\n",
          peak / 1e9, precision_name(precision), peak_size,
          precision == Precision::bf16 ? " with fp32 accumulation" : "", rank_peak[0] / 1e9,
          world.size);
      if (precision != Precision::fp32)
        std::printf("peak_fp32_gflops=%.3f (cuBLAS fp32 GEMM %d^3, the same way)\n", peaks[1] / 1e9,
                    peak_size);
    }
    const double share = 100 * achieved / peak;
    std::printf("peak_share=%.1f%%\n", share);
    if (share >= 100.05)  // above 100 as printed
      std::printf(
          "# the step outran the product timed as the peak: a small --peak-size (%d^3 here) or a "
          "busy machine while it ran does not measure the machine's rate\n",
          peak_size);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace lockstep::bench
