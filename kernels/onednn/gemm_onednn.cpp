#include <algorithm>
#include <array>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "kernels/gemm.h"
#include "kernels/onednn/onednn.h"
#include "kernels/onednn/util.h"
#include "kernels/parallel.h"

// The oneDNN twin of gemm_cpu: one matmul primitive per shape, with the transposes as strides of
// the operands' memory descriptors (no copies of A and B; C is copied only where stage_c says),
// alpha as the output scale and beta as a sum post-op (C = alpha op(A) op(B) + beta C). beta == 0
// leaves the post-op out, so C is not read.
// gemm_bias_onednn gives the matmul a bias operand (a row added to every row of C).
// gemm_bf16_onednn is the same matmul on bf16 operands (fp32 accumulation and C), where oneDNN
// has one for this CPU (its bf16 dot products: AVX512_BF16, AMX).
// A weight gradient's product (op(A) = A^T over many rows: k at least kSplitK times m and n) is
// split over the rank's threads by k, each thread's share a one-thread product, added in thread
// order (split_k below).

namespace lockstep::kernels {

namespace {

using dnnl::memory;
constexpr auto f32 = memory::data_type::f32;

// The operands' data type by their C++ type: float, or bf16 words.
template <class T>
constexpr memory::data_type operand_type() {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, uint16_t>);
  return std::is_same_v<T, float> ? f32 : memory::data_type::bf16;
}

struct Matmul {
  dnnl::matmul prim;
  memory a, b, c, bias, scratch;
};

long bits(float v) {
  int32_t i;
  std::memcpy(&i, &v, sizeof i);
  return i;
}

// Whether C goes through a staging copy whose rows are kPad floats longer than n. Rows of a
// multiple of 1 KiB (n = 2304, 3072: GPT-2 small's qkv and MLP widths) put every few rows of A, B
// and C into the same L1 sets, and oneDNN 2.6's brgemm matmul then ran at a third of its rate
// (2048 x 768 x 3072 at two threads: 87-110 GFLOP/s, 240-270 with any one operand's rows padded;
// docs/PERFORMANCE.md). The copy in (beta != 0) and out costs a few percent of such a product;
// the staging buffer (m x (n + kPad) floats) is kept per thread for the next call.
constexpr long kPad = 16;
bool stage_c(const GemmShape& s) { return s.n >= 1024 && s.n % 256 == 0 && s.m >= 256; }

Matmul make_matmul(const GemmShape& s, bool with_bias, memory::data_type ab) {
  const memory::dim m = s.m, n = s.n, k = s.k, ldc = stage_c(s) ? n + kPad : n;
  // Row-major storage: A is m x k (k x m when transposed), B is k x n (n x k), C is m x n.
  memory::desc a({m, k}, ab, s.trans_a ? memory::dims{1, m} : memory::dims{k, 1});
  memory::desc b({k, n}, ab, s.trans_b ? memory::dims{1, k} : memory::dims{n, 1});
  memory::desc c({m, n}, f32, memory::dims{ldc, 1});
  dnnl::primitive_attr attr;
  if (s.alpha != 1.0f) attr.set_output_scales(0, {s.alpha});
  if (s.beta != 0.0f) {
    dnnl::post_ops add;
    add.append_sum(s.beta);
    attr.set_post_ops(add);
  }
  memory::desc bias({1, n}, f32, memory::dims{n, 1});
  dnnl::matmul::primitive_desc pd(
      with_bias ? dnnl::matmul::desc(a, b, bias, c) : dnnl::matmul::desc(a, b, c),
      onednn::user_scratchpad(attr), onednn::engine());
  const dnnl::engine& e = onednn::engine();
  return {dnnl::matmul(pd),
          memory(a, e, DNNL_MEMORY_NONE),
          memory(b, e, DNNL_MEMORY_NONE),
          memory(c, e, DNNL_MEMORY_NONE),
          memory(bias, e, DNNL_MEMORY_NONE),
          memory(pd.scratchpad_desc(), e)};
}

}  // namespace

namespace {

template <class T>
void run(const GemmShape& s, const T* a, const T* b, const float* bias, float* c, const char* who) {
  try {
    constexpr memory::data_type ab = operand_type<T>();
    const std::array<long, 9> key{s.m,
                                  s.n,
                                  s.k,
                                  s.trans_a,
                                  s.trans_b,
                                  bits(s.alpha),
                                  bits(s.beta),
                                  bias != nullptr,
                                  static_cast<long>(ab)};
    Matmul& mm = onednn::cached<Matmul>(key, [&] { return make_matmul(s, bias != nullptr, ab); });
    mm.a.set_data_handle(const_cast<T*>(a));
    mm.b.set_data_handle(const_cast<T*>(b));
    const bool staged = stage_c(s);
    const size_t rows = static_cast<size_t>(s.m), n = static_cast<size_t>(s.n), ldc = n + kPad;
    thread_local std::vector<float> staging;
    if (staged) {
      staging.resize(rows * ldc);
      if (s.beta != 0.0f)
        for (size_t r = 0; r < rows; ++r)
          std::memcpy(&staging[r * ldc], c + r * n, n * sizeof(float));
    }
    mm.c.set_data_handle(staged ? staging.data() : c);
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, mm.a},
                                         {DNNL_ARG_WEIGHTS, mm.b},
                                         {DNNL_ARG_DST, mm.c},
                                         {DNNL_ARG_SCRATCHPAD, mm.scratch}};
    if (bias != nullptr) {
      mm.bias.set_data_handle(const_cast<float*>(bias));
      args.emplace(DNNL_ARG_BIAS, mm.bias);
    }
    dnnl::stream& st = onednn::stream();
    mm.prim.execute(st, args);
    st.wait();
    if (staged)
      for (size_t r = 0; r < rows; ++r)
        std::memcpy(c + r * n, &staging[r * ldc], n * sizeof(float));
  } catch (const dnnl::error& e) {
    if (std::is_same_v<T, uint16_t> && e.status == dnnl_unimplemented)
      throw std::runtime_error(std::string(who) + ": " + onednn_description() +
                               " has no bf16 matmul for this CPU");
    onednn::rethrow(who, e);
  }
}

// Whether a product goes through run_split_k at `threads` threads: C = A^T B with both operands'
// k rows stored contiguously (trans_a, not trans_b) and k long against m and n. oneDNN 2.6's
// threaded sgemm (its AVX2 matmul) splits such a product's small output over the threads and ran
// gpt:tiny's weight gradients (128-512 x 128-512 over 4,096 rows) at 1.5-1.7x its one-thread
// rate; split by k at two threads they ran 1.08-1.29x faster than that (docs/PERFORMANCE.md).
#if defined(_OPENMP)
constexpr int kSplitK = 4;
constexpr int kMinRowsPerThread = 256;
bool split_k(const GemmShape& s, int threads) {
  return threads > 1 && s.trans_a && !s.trans_b && s.k >= kSplitK * std::max(s.m, s.n) &&
         s.k >= kMinRowsPerThread * threads;
}

// C = alpha A^T B + beta C in `threads` parts of k, part p on rows [p per, (p + 1) per) of A and
// B: part 0 into C (alpha, beta), the others into partials of their own (alpha, beta 0), then
// C += partial 1 + partial 2 ... in that order, element by element over the threads. The bits
// depend on the thread count (as oneDNN's own threaded products' do), not on timing.
template <class T>
void run_split_k(const GemmShape& s, const T* a, const T* b, float* c, int threads,
                 const char* who) {
  const size_t mn = static_cast<size_t>(s.m) * s.n;
  thread_local std::vector<float> kept;  // the calling thread's, reused by its next call
  kept.resize(mn * (threads - 1));
  float* const partials = kept.data();  // (inside the region, `kept` would be each thread's own)
  const int per = (s.k + threads - 1) / threads;
  std::vector<std::exception_ptr> errors(threads);
#pragma omp parallel num_threads(threads)
  {
    omp_set_num_threads(1);  // each part's product planned for the one thread it runs on (util.h)
    // Part p on thread p, or on thread p mod the team's size where the runtime gave fewer.
    const int team = omp_get_num_threads();
    for (int p = omp_get_thread_num(); p < threads; p += team) {
      try {
        const int k0 = std::min(s.k, p * per), k1 = std::min(s.k, k0 + per);
        GemmShape part = s;
        part.k = k1 - k0;
        if (p > 0) part.beta = 0.0f;
        // run() itself, not gemm_*onednn: a thread doing two parts (a smaller team) must not split
        // again into `kept`. Every part has rows: k >= kMinRowsPerThread * threads.
        run(part, a + static_cast<size_t>(k0) * s.m, b + static_cast<size_t>(k0) * s.n, nullptr,
            p == 0 ? c : partials + (p - 1) * mn, who);
      } catch (...) {
        errors[p] = std::current_exception();
      }
    }
#pragma omp barrier
    const bool ok = std::all_of(errors.begin(), errors.end(),  // the same on every thread here
                                [](const std::exception_ptr& e) { return e == nullptr; });
    if (ok) {
#pragma omp for schedule(static)
      for (size_t j = 0; j < mn; ++j)
        for (int p = 0; p < threads - 1; ++p) c[j] += partials[p * mn + j];
    }
  }
  for (const std::exception_ptr& e : errors)
    if (e != nullptr) std::rethrow_exception(e);
}
#endif

// gemm_onednn and gemm_bf16_onednn: the contract's checks, an empty product, the k-split.
template <class T>
void product(const GemmShape& s, const T* a, const T* b, float* c, const char* who) {
  if (s.m < 0 || s.n < 0 || s.k < 0)
    throw std::invalid_argument(std::string(who) + ": negative dimension");
  if (s.m == 0 || s.n == 0) return;
  if (s.k == 0) {  // an empty product: C = beta C (a primitive cannot have a zero dimension)
    const size_t count = static_cast<size_t>(s.m) * s.n;
    if (s.beta == 0.0f)
      std::fill_n(c, count, 0.0f);
    else
      std::transform(c, c + count, c, [&](float v) { return s.beta * v; });
    return;
  }
#if defined(_OPENMP)
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  if (split_k(s, threads)) {
    run_split_k(s, a, b, c, threads, who);
    return;
  }
#endif
  run(s, a, b, nullptr, c, who);
}

}  // namespace

void gemm_onednn(const GemmShape& s, const float* a, const float* b, float* c) {
  product(s, a, b, c, "gemm_onednn");
}

void gemm_bf16_onednn(const GemmShape& s, const uint16_t* a, const uint16_t* b, float* c) {
  product(s, a, b, c, "gemm_bf16_onednn");
}

void gemm_bias_onednn(const GemmShape& s, const float* a, const float* b, const float* bias,
                      float* c) {
  // oneDNN scales the bias with the product (dst = alpha (A B + bias)): only alpha 1 is the
  // contract's.
  if (s.m < 0 || s.n < 0 || s.k <= 0 || s.alpha != 1.0f || s.beta != 0.0f)
    throw std::invalid_argument("gemm_bias_onednn: needs m, n >= 0, k > 0, alpha 1 and beta 0");
  if (s.m == 0 || s.n == 0) return;
  run(s, a, b, bias, c, "gemm_bias_onednn");
}

}  // namespace lockstep::kernels
