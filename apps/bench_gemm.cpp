// lockstep-bench gemm: a GPT's matrix products one at a time, as its training step calls them,
// against the peak measured in the same run: where the products' share of a step goes, shape by
// shape (issues 34 and 36: "where a goal is missed, say where the time goes").
//
// For --model (a GPT: gpt, gpt:tiny, gpt:small, key=value overrides) at this rank's share of
// --global-batch (rows = batch / ranks x context): each block's four dense products (qkv, proj, fc,
// fc2) forward, their input gradients (dx = dy W^T) and weight gradients (dw += x^T dy), and the
// tied head's three (logits = x wte^T, dx = dlogits wte, dwte += dlogits^T x), in the layers'
// row-major layouts, each timed alone on buffers of its own size: the best of --repetitions after
// one untimed call. The step's products are the blocks' times the layers, plus the head's.
//   CPU: oneDNN's matmul (the layers' kernel, gemm_onednn) and OpenBLAS's sgemm beside it, on the
//   rank's --threads, timed by the host clock, a library's products in rounds (host_products).
//   With --precision bf16 (the CPU layers compute in fp32: this asks what bf16 products would
//   give): oneDNN's matmul in fp32, on bf16 operands (gemm_bf16_onednn, C in fp32), and on bf16
//   operands cast from fp32 before each product (A and B, one thread: what a step without bf16
//   activations would pay), against oneDNN's bf16 2048^3 rate as the peak.
//   GPU (--device cuda): fp32 through cuBLAS (cublasSgemm, TF32 off); bf16 through cuBLAS with C
//   in fp32 (gemm_bf16_cuda) and in bf16 (gemm_bf16_out_cuda, where C is not accumulated), and
//   every algorithm cuBLASLt's heuristic offers for the bf16-out product without an epilogue timed
//   one by one: the heuristic's first against the fastest of them (the layers' cuBLASLt plans ask
//   the same heuristic with their epilogues set, and may be offered other algorithms). CUDA
//   events, several launches an interval.
// Every rank times its own products (ranks on one host share it); rank 0 prints a table, then
// key=value totals. Bad options throw UsageError on every rank.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "apps/bench_args.h"
#include "apps/bench_commands.h"
#include "apps/bench_peak.h"
#include "apps/bench_setup.h"
#include "apps/train_options.h"
#include "kernels/cast.h"
#include "kernels/cuda/memory.h"
#include "kernels/gemm.h"
#include "kernels/onednn/onednn.h"
#include "runtime/base/buffer.h"
#include "runtime/base/error.h"
#include "runtime/model/layer_registry.h"
#include "runtime/model/model_spec.h"
#include "runtime/process/context.h"

namespace lockstep::bench {

namespace {

namespace po = boost::program_options;

const std::vector<std::string> kTrainOptions = {"model", "global-batch", "device", "precision",
                                                "threads"};

struct Options {
  TrainOptions train;
  int repetitions = 5;
  int algorithms = 16;
  int peak_size = 0;  // 0: 2048 on the CPU, 8192 on a GPU
};

bool parse(int argc, char** argv, const World& world, Options* o) {
  po::options_description desc(
      "lockstep-bench gemm [options] (here --model defaults to gpt:small, --global-batch to 8)");
  // clang-format off
  desc.add_options()
      ("help,h", "show this help")
      ("repetitions", po::value(&o->repetitions)->default_value(5),
       "timed calls of each product (the best is kept), after one untimed")
      ("algorithms", po::value(&o->algorithms)->default_value(16),
       "with --device cuda --precision bf16: at most this many of cuBLASLt's algorithms a product")
      ("peak-size", po::value(&o->peak_size)->default_value(0),
       "n of the n^3 GEMM that measures the peak (0: 2048 on the CPU, 8192 on a GPU)");
  // clang-format on
  po::variables_map vm;
  if (!parse_with_train_options("gemm", argc, argv, world, desc, kTrainOptions, o->train, &vm))
    return false;
  // GPT-2 small's shape at issue 36's batch by default, not lockstep-train's CNN at 128.
  if (vm["model"].defaulted()) o->train.config.model = "gpt:small";
  if (vm["global-batch"].defaulted()) o->train.config.global_batch = 8;
  if (o->repetitions < 1 || o->repetitions > 1000)
    throw UsageError("--repetitions must be in [1, 1000]");
  if (o->algorithms < 1 || o->algorithms > 32) throw UsageError("--algorithms must be in [1, 32]");
  check_peak_size(o->peak_size);
  return true;
}

// The GPT's sizes from its spec (embed:D:T[:V], L x block:H, lmhead).
struct Gpt {
  int dim = 0, ctx = 0, vocab = 256, layers = 0;
};
Gpt gpt_of(const std::string& model) {
  const ModelSpec spec = parse_model_spec(model);
  Gpt g;
  for (const LayerSpec& l : spec.layers)
    if (l.type == "block") ++g.layers;
  if (spec.layers.empty() || spec.layers[0].type != "embed" || g.layers == 0)
    throw UsageError("--model " + model +
                     ": lockstep-bench gemm times a GPT's products (gpt, gpt:tiny, gpt:small, "
                     "gpt:layers=L,heads=H,dim=D,ctx=T,vocab=V)");
  const std::vector<int>& a = spec.layers[0].args;
  g.dim = a[0], g.ctx = a[1], g.vocab = a.size() > 2 ? a[2] : 256;
  return g;
}

struct Product {
  std::string name;
  kernels::GemmShape shape;
  int per_step = 1;  // times a step calls it: the layers for a block's, 1 for the head's
  double flops() const { return 2.0 * shape.m * static_cast<double>(shape.n) * shape.k; }
  size_t a_size() const { return static_cast<size_t>(shape.m) * shape.k; }
  size_t b_size() const { return static_cast<size_t>(shape.k) * shape.n; }
  size_t c_size() const { return static_cast<size_t>(shape.m) * shape.n; }
};

// The dense layers' calls (kernels/dense.cpp): W stored [in, out]; forward y = x W, dx = dy W^T,
// dw += x^T dy. The tied head: wte stored [vocab, dim].
std::vector<Product> products_of(const Gpt& g, int rows) {
  std::vector<Product> out;
  const int d = g.dim;
  const std::pair<const char*, std::pair<int, int>> dense[] = {
      {"qkv", {d, 3 * d}}, {"proj", {d, d}}, {"fc", {d, 4 * d}}, {"fc2", {4 * d, d}}};
  for (const auto& [name, io] : dense) {
    const auto [in, o] = io;
    out.push_back({std::string(name) + " forward", {.m = rows, .n = o, .k = in}, g.layers});
    out.push_back(
        {std::string(name) + " dx", {.m = rows, .n = in, .k = o, .trans_b = true}, g.layers});
    out.push_back({std::string(name) + " dw",
                   {.m = in, .n = o, .k = rows, .trans_a = true, .beta = 1.0f},
                   g.layers});
  }
  out.push_back({"head forward", {.m = rows, .n = g.vocab, .k = d, .trans_b = true}, 1});
  out.push_back({"head dx", {.m = rows, .n = d, .k = g.vocab}, 1});
  out.push_back({"head dw", {.m = g.vocab, .n = d, .k = rows, .trans_a = true, .beta = 1.0f}, 1});
  return out;
}

std::string op_of(const kernels::GemmShape& s) {
  return std::string(s.trans_a ? "T" : "N") + "," + (s.trans_b ? "T" : "N") +
         (s.beta != 0.0f ? ",+=" : "");
}

// The timed variants of one product: their names and seconds (negative: not timed).
struct Row {
  const Product* product;
  std::vector<double> seconds;
  std::string note;
};

std::vector<std::string> host_products(const std::vector<Product>& ps, int repetitions, bool bf16,
                                       std::vector<Row>& rows) {
  size_t most = 0;
  for (const Product& p : ps) most = std::max({most, p.a_size(), p.b_size(), p.c_size()});
  std::vector<float> a(most, 0.5f), b(most, 0.25f), c(most, 0.0f);
  std::vector<uint16_t> a16(bf16 ? most : 0), b16(bf16 ? most : 0);
  const bool onednn = kernels::onednn_built();
  for (const Product& p : ps) rows.push_back(Row{&p, {}, ""});
  // A column at a time, in rounds over its products, each product's best of its rounds: a
  // transient (Open MPI's daemon starting beside a singleton, OpenBLAS's pthreads spinning for a
  // while after a product) costs a round rather than every repetition of the products it meets,
  // several milliseconds a call at 2 threads on a 2-core VM. OpenBLAS's column last, as the
  // peak's (bench_peak.cpp).
  const auto column = [&](auto gemm) {
    for (Row& row : rows) gemm(row.product->shape);  // untimed: plans made, pages touched
    std::vector<double> best(rows.size(), 1e30);
    for (int r = 0; r < repetitions; ++r)
      for (size_t i = 0; i < rows.size(); ++i)
        best[i] = std::min(best[i], host_seconds([&] { gemm(rows[i].product->shape); }));
    for (size_t i = 0; i < rows.size(); ++i) rows[i].seconds.push_back(best[i]);
  };
  if (onednn)
    column([&](const kernels::GemmShape& s) {
      kernels::gemm_onednn(s, a.data(), b.data(), c.data());
    });
  if (bf16) {  // onednn: run_gemm_bench checked
    kernels::cast_f32_to_bf16_cpu(a.data(), a16.data(), most);
    kernels::cast_f32_to_bf16_cpu(b.data(), b16.data(), most);
    column([&](const kernels::GemmShape& s) {
      kernels::gemm_bf16_onednn(s, a16.data(), b16.data(), c.data());
    });
    column([&](const kernels::GemmShape& s) {
      const size_t as = static_cast<size_t>(s.m) * s.k, bs = static_cast<size_t>(s.k) * s.n;
      kernels::cast_f32_to_bf16_cpu(a.data(), a16.data(), as);
      kernels::cast_f32_to_bf16_cpu(b.data(), b16.data(), bs);
      kernels::gemm_bf16_onednn(s, a16.data(), b16.data(), c.data());
    });
    return {"oneDNN matmul fp32", "oneDNN matmul bf16", "oneDNN bf16 with the casts"};
  }
  column([&](const kernels::GemmShape& s) { kernels::gemm_cpu(s, a.data(), b.data(), c.data()); });
  if (onednn) return {"oneDNN matmul", "OpenBLAS sgemm"};
  return {"OpenBLAS sgemm"};
}

std::vector<std::string> device_products(const std::vector<Product>& ps, const Options& o,
                                         std::vector<Row>& rows) {
  size_t most = 0;
  for (const Product& p : ps) most = std::max({most, p.a_size(), p.b_size(), p.c_size()});
  const bool bf16 = o.train.config.precision == Precision::bf16;
  Buffer<float> a(DeviceKind::cuda, most), b(DeviceKind::cuda, most), c(DeviceKind::cuda, most);
  const std::vector<float> half(most, 0.5f);
  a.write(half.data(), 0, most);
  b.write(half.data(), 0, most);
  c.write(half.data(), 0, most);
  Buffer<uint16_t> a16(DeviceKind::cuda, bf16 ? most : 0), b16(DeviceKind::cuda, bf16 ? most : 0),
      c16(DeviceKind::cuda, bf16 ? most : 0);
  OwnedStream owned;
  const cudaStream_t stream = owned.stream;
  constexpr int kLaunches = 4;  // timed together
  if (bf16) {
    kernels::cast_f32_to_bf16_cuda(a.data(), a16.data(), most, stream);
    kernels::cast_f32_to_bf16_cuda(b.data(), b16.data(), most, stream);
  }
  for (const Product& p : ps) {
    Row row{&p, {}, ""};
    const kernels::GemmShape& s = p.shape;
    if (!bf16) {
      row.seconds.push_back(best_device_seconds(o.repetitions, kLaunches, stream, [&] {
        kernels::gemm_cuda(s, a.data(), b.data(), c.data(), stream);
      }));
    } else {
      row.seconds.push_back(best_device_seconds(o.repetitions, kLaunches, stream, [&] {
        kernels::gemm_bf16_cuda(s, a16.data(), b16.data(), c.data(), stream);
      }));
      // The bf16-out and cuBLASLt columns time C = op(A) op(B) alone (beta 0): an accumulated
      // product's (dw's) figure there is that of its product without the addition.
      kernels::GemmShape plain = s;
      plain.beta = 0.0f;
      row.seconds.push_back(best_device_seconds(o.repetitions, kLaunches, stream, [&] {
        kernels::gemm_bf16_out_cuda(plain, a16.data(), b16.data(), c16.data(), stream);
      }));
      // ms[i]: algorithm i's best milliseconds over the repetitions (1e30: it refused the shape).
      std::vector<float> ms;
      for (int r = 0; r < o.repetitions; ++r) {
        const std::vector<float> t = kernels::gemm_bf16_lt_algorithm_times_cuda(
            plain, a16.data(), b16.data(), c16.data(), o.algorithms, 4, stream);
        if (ms.size() < t.size()) ms.resize(t.size(), 1e30f);
        for (size_t i = 0; i < t.size(); ++i)
          if (t[i] >= 0) ms[i] = std::min(ms[i], t[i]);
      }
      const auto fastest = std::min_element(ms.begin(), ms.end());
      const bool any = fastest != ms.end() && *fastest < 1e29f;
      row.seconds.push_back(!ms.empty() && ms[0] < 1e29f ? 1e-3 * ms[0] : -1);
      row.seconds.push_back(any ? 1e-3 * *fastest : -1);
      int offered = 0;
      for (float t : ms) offered += t < 1e29f;
      row.note = any ? "fastest: #" + std::to_string(fastest - ms.begin() + 1) + " of " +
                           std::to_string(offered)
                     : "cuBLASLt offered no algorithm";
    }
    rows.push_back(std::move(row));
  }
  if (!bf16) return {"cuBLAS sgemm (TF32 off)"};
  return {"cuBLAS bf16, C fp32", "cuBLAS bf16, C bf16", "cuBLASLt heuristic's first",
          "cuBLASLt fastest"};
}

}  // namespace

int run_gemm_bench(int argc, char** argv, const World& world) {
  Options o;
  if (!parse(argc, argv, world, &o)) return 0;
  const TrainConfig& given = o.train.config;
  const Gpt gpt = gpt_of(given.model);
  if (given.global_batch % world.size != 0)
    throw UsageError("--global-batch " + std::to_string(given.global_batch) +
                     " must divide by the ranks (" + std::to_string(world.size) + ")");
  BenchContext bench = make_bench_context(world, o.train);
  const Context& ctx = bench.ctx;
  const bool gpu = ctx.device == DeviceKind::cuda;
  const bool bf16 = given.precision == Precision::bf16;
  if (bf16 && !gpu) {
    if (!kernels::onednn_built())
      throw UsageError("--precision bf16 on the CPU needs oneDNN (this build has none)");
    try {  // one small product: does oneDNN have a bf16 matmul for this CPU?
      const std::vector<uint16_t> one(1, 0x3f80);
      float c = 0;
      kernels::gemm_bf16_onednn({.m = 1, .n = 1, .k = 1}, one.data(), one.data(), &c);
    } catch (const std::runtime_error& e) {
      throw UsageError(std::string("--precision bf16 on the CPU: ") + e.what());
    }
  }
  const int threads = bench.threads;
  const int rows = static_cast<int>(given.global_batch / world.size) * gpt.ctx;
  const std::vector<Product> ps = products_of(gpt, rows);

  std::vector<Row> table;
  const std::vector<std::string> columns =
      gpu ? device_products(ps, o, table) : host_products(ps, o.repetitions, bf16, table);
  // The peak in the same run, as lockstep-bench train measures it.
  double peak = 0;
  std::string peak_name;
  if (gpu) {
    const int n = o.peak_size > 0 ? o.peak_size : 8192;
    peak = device_gemm_rate(*ctx.host, n, given.precision);
    peak_name =
        std::string("cuBLAS ") + precision_name(given.precision) + " " + std::to_string(n) + "^3";
  } else if (bf16) {
    const int n = o.peak_size > 0 ? o.peak_size : 2048;
    peak = host_bf16_gemm_rate(*ctx.host, n);
    peak_name = "oneDNN matmul bf16 " + std::to_string(n) + "^3";
  } else {
    for (const KernelRate& k : host_kernel_rates(*ctx.host, o.peak_size > 0 ? o.peak_size : 2048,
                                                 /*convolutions=*/false))
      if (k.rate > peak) peak = k.rate, peak_name = k.name;
  }
  if (world.rank != 0) return 0;

  const double unit = gpu ? 1e12 : 1e9;
  const char* rate = gpu ? "TFLOP/s" : "GFLOP/s";
  const std::string where =
      gpu ? std::string("cuda, ") + precision_name(given.precision)
          : std::string("cpu, ") + precision_name(given.precision) + ", " +
                std::to_string(threads) + " thread(s), " +
                (kernels::onednn_built() ? kernels::onednn_description() : "OpenBLAS");
  std::printf(
      "# lockstep-bench gemm: %s (%d blocks, dim %d, context %d, vocabulary %d), %d rows a "
      "rank, %s\n",
      given.model.c_str(), gpt.layers, gpt.dim, gpt.ctx, gpt.vocab, rows, where.c_str());
  std::printf("# peak: %s, %.1f %s; each product the best of %d; ms and %s per column:",
              peak_name.c_str(), peak / unit, rate, o.repetitions, rate);
  for (const std::string& c : columns) std::printf(" | %s", c.c_str());
  std::printf("\n");
  // Per column: the time and the FLOPs of the products it timed, and how many it could not time (a
  // cuBLASLt column where no algorithm took a shape), which its share leaves out rather than count
  // their FLOPs at no time.
  std::vector<double> step(columns.size(), 0.0), timed_flops(columns.size(), 0.0);
  std::vector<int> untimed(columns.size(), 0);
  double step_flops = 0;
  for (const Row& r : table) {
    const Product& p = *r.product;
    std::printf("%-13s x%-3d %6d %6d %6d %-6s", p.name.c_str(), p.per_step, p.shape.m, p.shape.n,
                p.shape.k, op_of(p.shape).c_str());
    for (size_t i = 0; i < r.seconds.size(); ++i) {
      if (r.seconds[i] < 0) {
        std::printf(" |        -        ");
        ++untimed[i];
        continue;
      }
      // Four significant digits: a small product's fraction of a microsecond, or a stalled one's
      // rate, is not printed as 0.
      std::printf(" | %8.4g %7.4g", 1e3 * r.seconds[i], p.flops() / r.seconds[i] / unit);
      step[i] += p.per_step * r.seconds[i];
      timed_flops[i] += p.per_step * p.flops();
    }
    if (!r.note.empty()) std::printf("  (%s)", r.note.c_str());
    std::printf("\n");
    step_flops += p.per_step * p.flops();
  }
  std::printf("gemm_flops_per_step=%.4g\n", step_flops);
  std::printf("gemm_ms_at_peak=%.3f\n", 1e3 * step_flops / peak);
  for (size_t i = 0; i < columns.size(); ++i) {
    std::printf("gemm_ms_per_step=%.3f share_of_peak=%.1f%% (%s", 1e3 * step[i],
                step[i] > 0 ? 100.0 * timed_flops[i] / step[i] / peak : 0.0, columns[i].c_str());
    if (untimed[i] > 0)
      std::printf("; %d of the %zu products not timed, left out of both", untimed[i], table.size());
    std::printf(")\n");
  }
  return 0;
}

}  // namespace lockstep::bench
