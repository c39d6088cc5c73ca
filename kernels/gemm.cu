#include <cublasLt.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cuda/bias.cuh"
#include "kernels/cuda/check.h"
#include "kernels/cuda/cublas_handle.h"
#include "kernels/cuda/memory.h"
#include "kernels/gemm.h"

// cuBLAS is column-major; our matrices are row-major. A row-major m x n matrix read as
// column-major is its n x m transpose, so C = op(A) op(B) is computed as C^T = op(B)^T op(A)^T:
// swap the operands and the m/n dimensions, and keep each operand's own transpose flag and
// leading dimension.

namespace lockstep::kernels {

namespace {

struct ColumnMajorCall {
  cublasOperation_t op_b, op_a;  // first and second cuBLAS operand: B, then A
  int ld_a, ld_b;
};

ColumnMajorCall prepare(const GemmShape& s, const char* who) {
  if (s.m < 0 || s.n < 0 || s.k < 0)
    throw std::invalid_argument(std::string(who) + ": negative dimension");
  // Leading dimensions of the stored (row-major) operands; cuBLAS wants >= 1 even when k == 0.
  const int lda = s.trans_a ? s.m : s.k;
  const int ldb = s.trans_b ? s.k : s.n;
  return {s.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, s.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
          lda > 0 ? lda : 1, ldb > 0 ? ldb : 1};
}

}  // namespace

void gemm_cuda(const GemmShape& s, const float* a, const float* b, float* c, cudaStream_t stream) {
  const ColumnMajorCall call = prepare(s, "gemm_cuda");
  if (s.m == 0 || s.n == 0) return;
  LS_CHECK_CUBLAS(cublasSgemm(cublas_handle(stream), call.op_b, call.op_a, s.n, s.m, s.k, &s.alpha,
                              b, call.ld_b, a, call.ld_a, &s.beta, c, s.n));
}

namespace {

// bf16 products accumulated in fp32 (CUBLAS_COMPUTE_32F) on the tensor cores, C of type c_type.
void gemm_bf16_ex(const GemmShape& s, const uint16_t* a, const uint16_t* b, void* c,
                  cudaDataType_t c_type, cudaStream_t stream, const char* who) {
  const ColumnMajorCall call = prepare(s, who);
  if (s.m == 0 || s.n == 0) return;
  LS_CHECK_CUBLAS(cublasGemmEx(cublas_handle(stream), call.op_b, call.op_a, s.n, s.m, s.k, &s.alpha,
                               b, CUDA_R_16BF, call.ld_b, a, CUDA_R_16BF, call.ld_a, &s.beta, c,
                               c_type, s.n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace

void gemm_bf16_cuda(const GemmShape& s, const uint16_t* a, const uint16_t* b, float* c,
                    cudaStream_t stream) {
  gemm_bf16_ex(s, a, b, c, CUDA_R_32F, stream, "gemm_bf16_cuda");
}

void gemm_bf16_out_cuda(const GemmShape& s, const uint16_t* a, const uint16_t* b, uint16_t* c16,
                        cudaStream_t stream) {
  if (s.beta != 0.0f) throw std::invalid_argument("gemm_bf16_out_cuda: beta must be 0");
  gemm_bf16_ex(s, a, b, c16, CUDA_R_16BF, stream, "gemm_bf16_out_cuda");
}

namespace {

constexpr size_t kLtWorkspaceBytes = size_t(32) << 20;  // what cuBLAS asks for on Hopper

// The largest power of two (at most 256) that divides the address: cuBLASLt's heuristics assume
// 256-byte aligned operands unless told otherwise, and an algorithm picked for aligned operands
// may refuse others.
uint32_t alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t bytes = 256;
  while (bytes > 1 && a % bytes != 0) bytes /= 2;
  return bytes;
}

// The epilogues the plans describe: the bias with an fp32 output (gemm_bf16_bias_cuda), the bf16
// bias with a bf16 output (gemm_bf16_bias_out_cuda), the bias and GELU with a bf16 output and the
// bf16 pre-activation beside it (gemm_bf16_bias_gelu_cuda), the GELU's derivative at that
// pre-activation times the product, in bf16 (gemm_bf16_dgelu_out_cuda), or none with a bf16 output
// (gemm_bf16_lt_algorithm_times_cuda).
enum class LtEpilogue { bias, bias16, gelu, dgelu, none16 };

// One bf16 GEMM with an epilogue, described once per shape, epilogue and alignment: its descriptors
// and the algorithm cuBLASLt's heuristic picked (none: cuBLASLt offers nothing for it).
struct LtPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool usable = false;
};

// Per (thread, device), as cublas_handle: the cuBLASLt handle, its workspace and the plans. Kept
// until the process exits, for the reason cublas_handle.h gives.
struct LtState {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  // (epilogue, m, n, k, trans_a, trans_b, beta, and the alignments of A, B, C and D (the least of
  // the two), the bias and aux (256 when there is none))
  std::map<std::tuple<LtEpilogue, int, int, int, bool, bool, float, uint32_t, uint32_t, uint32_t,
                      uint32_t, uint32_t>,
           LtPlan>
      plans;
};

LtState& lt_state() {
  thread_local std::vector<LtState> states;
  int device = 0;
  LS_CHECK_CUDA(cudaGetDevice(&device));
  if (static_cast<size_t>(device) >= states.size()) states.resize(device + 1);
  LtState& st = states[device];
  if (st.handle == nullptr) {
    LS_CHECK_CUBLAS(cublasLtCreate(&st.handle));
    st.workspace = cuda_alloc(kLtWorkspaceBytes);
  }
  return st;
}

// Row-major C (m x n) = op(A) op(B) is column-major C^T = op(B)^T op(A)^T, as prepare() above:
// cuBLASLt's first operand is our B, its second our A; the bias runs along C^T's rows (our n), and
// so does the GELU's pre-activation matrix (aux, leading dimension n). aux: that matrix's pointer
// (gelu, written; dgelu, read), and bias the bias's (null for dgelu): the heuristic reads both
// for their alignment (cublasLt.h: a pointer left unset is taken as fully aligned), so the bias's
// alignment is in the plan's key too. With `offers`, the algorithms the heuristic offers (at most
// *offered of them) are written there and *offered set to their number; the plan keeps the first.
LtPlan make_plan(LtState& st, const GemmShape& s, LtEpilogue kind, uint32_t align_a,
                 uint32_t align_b, uint32_t align_c, const void* bias, void* aux = nullptr,
                 cublasLtMatmulHeuristicResult_t* offers = nullptr, int* offered = nullptr) {
  LtPlan p;
  const cublasOperation_t op_first = s.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_second = s.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const bool gelu = kind == LtEpilogue::gelu || kind == LtEpilogue::dgelu,
             out16 = kind != LtEpilogue::bias;
  const cublasLtEpilogue_t epilogue = kind == LtEpilogue::dgelu    ? CUBLASLT_EPILOGUE_DGELU
                                      : gelu                       ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                                      : kind == LtEpilogue::none16 ? CUBLASLT_EPILOGUE_DEFAULT
                                                                   : CUBLASLT_EPILOGUE_BIAS;
  const cudaDataType_t out_type = out16 ? CUDA_R_16BF : CUDA_R_32F;
  LS_CHECK_CUBLAS(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  LS_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_first,
                                                 sizeof(op_first)));
  LS_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_second,
                                                 sizeof(op_second)));
  LS_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                                 sizeof(epilogue)));
  if (out16 && kind != LtEpilogue::dgelu && kind != LtEpilogue::none16) {
    // the bias of the output's type, as cublasLt.h asks
    const int32_t bias_type = CUDA_R_16BF;
    LS_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                   &bias_type, sizeof(bias_type)));
  }
  LS_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                 sizeof(bias)));
  if (gelu) {
    const int64_t aux_ld = s.n;
    LS_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                                   &aux_ld, sizeof(aux_ld)));
    LS_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(
        p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
  }
  // Stored shapes (before op), column-major: our B is k x n row-major (n x k if trans_b).
  const uint64_t first_rows = s.trans_b ? s.k : s.n, first_cols = s.trans_b ? s.n : s.k;
  const uint64_t second_rows = s.trans_a ? s.m : s.k, second_cols = s.trans_a ? s.k : s.m;
  LS_CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16BF, first_rows, first_cols,
                                             static_cast<int64_t>(first_rows)));
  LS_CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16BF, second_rows, second_cols,
                                             static_cast<int64_t>(second_rows)));
  LS_CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&p.c, out_type, s.n, s.m, s.n));

  cublasLtMatmulPreference_t pref = nullptr;
  LS_CHECK_CUBLAS(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = kLtWorkspaceBytes;
  LS_CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> aligns[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_b},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_a},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_c},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_c}};
  for (const auto& [attr, bytes] : aligns)
    LS_CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref, attr, &bytes, sizeof(bytes)));
  cublasLtMatmulHeuristicResult_t one{};
  cublasLtMatmulHeuristicResult_t* results = offers != nullptr ? offers : &one;
  const int wanted = offers != nullptr ? *offered : 1;
  int found = 0;
  const cublasStatus_t rc = cublasLtMatmulAlgoGetHeuristic(st.handle, p.desc, p.a, p.b, p.c, p.c,
                                                           pref, wanted, results, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (rc != CUBLAS_STATUS_SUCCESS) found = 0;
  if (offered != nullptr) *offered = found;
  if (found > 0 && results[0].state == CUBLAS_STATUS_SUCCESS) {
    p.algo = results[0].algo;
    p.usable = true;
  }
  return p;
}

}  // namespace

void gemm_bf16_bias_cuda(const GemmShape& s, const uint16_t* a, const uint16_t* b,
                         const float* bias, float* c, cudaStream_t stream, const float* c_in) {
  prepare(s, "gemm_bf16_bias_cuda");
  if (s.beta != 0.0f && s.beta != 1.0f)
    throw std::invalid_argument("gemm_bf16_bias_cuda: beta must be 0 or 1");
  if (s.m == 0 || s.n == 0) return;
  if (c_in == nullptr) c_in = c;
  LtState& st = lt_state();
  // C is read from c_in and D written to c: the preference asks for the lesser alignment of the two
  const uint32_t align_a = alignment(a), align_b = alignment(b),
                 align_c = std::min(alignment(c), alignment(c_in));
  const auto key = std::make_tuple(LtEpilogue::bias, s.m, s.n, s.k, s.trans_a, s.trans_b, s.beta,
                                   align_a, align_b, align_c, alignment(bias), 256u);
  auto it = st.plans.find(key);
  if (it == st.plans.end())
    it = st.plans.emplace(key, make_plan(st, s, LtEpilogue::bias, align_a, align_b, align_c, bias))
             .first;
  LtPlan& p = it->second;
  // cuBLASLt's bias epilogue wants 16-byte aligned operands (llm.c's matmul_cublaslt insists on it
  // too); anything less takes the fill.
  if (p.usable && std::min({align_a, align_b, align_c, alignment(bias)}) >= 16) {
    LS_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                   sizeof(bias)));
    const cublasStatus_t rc =
        cublasLtMatmul(st.handle, p.desc, &s.alpha, b, p.a, a, p.b, &s.beta, c_in, p.c, c, p.c,
                       &p.algo, st.workspace, kLtWorkspaceBytes, stream);
    if (rc == CUBLAS_STATUS_SUCCESS) return;
    // A refusal of the algorithm the heuristic picked: this shape takes the fill and the plain
    // GEMM from now on.
    if (rc != CUBLAS_STATUS_NOT_SUPPORTED && rc != CUBLAS_STATUS_INVALID_VALUE) LS_CHECK_CUBLAS(rc);
    p.usable = false;
  }
  // C = C_in + bias (or bias alone), then the GEMM adds to it.
  const size_t rows = static_cast<size_t>(s.m);
  if (s.beta == 0.0f) {
    cuda::fill_rows(c, bias, rows, s.n, stream);
  } else {
    if (c_in != c) cuda_copy_on_device_async(c, c_in, rows * s.n * sizeof(float), stream);
    cuda::add_rows(c, bias, rows, s.n, stream);
  }
  GemmShape with_bias = s;
  with_bias.beta = 1.0f;
  gemm_bf16_cuda(with_bias, a, b, c, stream);
}

namespace {

// The products written in bf16 with their epilogue in cuBLASLt: kind bias16 (c16 = bf16 of the
// product + bias16), gelu (c16 = bf16 of GELU(z), aux = bf16 of z, z = the product + bias16) or
// dgelu (c16 = bf16 of GELU'(aux) times the product; no bias).
// False, having enqueued nothing, where cuBLASLt cannot take it (see gemm.h).
bool lt_bf16_out(LtEpilogue kind, const GemmShape& s, const uint16_t* a, const uint16_t* b,
                 const uint16_t* bias16, uint16_t* c16, uint16_t* aux, cudaStream_t stream,
                 const char* who) {
  prepare(s, who);
  if (s.alpha != 1.0f || s.beta != 0.0f)
    throw std::invalid_argument(std::string(who) + ": alpha must be 1 and beta 0");
  if (s.m == 0 || s.n == 0) return true;
  // The GELU's pre-activation's leading dimension must be a multiple of 8, and cuBLASLt's
  // epilogues want 16-byte aligned operands (gemm_bf16_bias_cuda).
  if (aux != nullptr && s.n % 8 != 0) return false;
  for (const void* p :
       {static_cast<const void*>(a), static_cast<const void*>(b),
        bias16 != nullptr ? static_cast<const void*>(bias16) : c16, static_cast<const void*>(c16),
        aux != nullptr ? static_cast<const void*>(aux) : c16})
    if (alignment(p) < 16) return false;
  LtState& st = lt_state();
  // The output's alignment stands for both matrices the GELU's epilogue writes; the heuristic reads
  // the aux pointer itself too, so its alignment is in the key on its own.
  const uint32_t align_aux = aux != nullptr ? alignment(aux) : 256u;
  const uint32_t align_a = alignment(a), align_b = alignment(b),
                 align_c = std::min(alignment(c16), align_aux);
  const auto key = std::make_tuple(kind, s.m, s.n, s.k, s.trans_a, s.trans_b, 0.0f, align_a,
                                   align_b, align_c, alignment(bias16), align_aux);
  auto it = st.plans.find(key);
  if (it == st.plans.end())
    it =
        st.plans.emplace(key, make_plan(st, s, kind, align_a, align_b, align_c, bias16, aux)).first;
  LtPlan& p = it->second;
  if (!p.usable) return false;
  LS_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias16,
                                                 sizeof(bias16)));
  if (aux != nullptr) {
    void* aux_pointer = aux;
    LS_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(
        p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux_pointer, sizeof(aux_pointer)));
  }
  const float zero = 0.0f;
  const cublasStatus_t rc =
      cublasLtMatmul(st.handle, p.desc, &s.alpha, b, p.a, a, p.b, &zero, c16, p.c, c16, p.c,
                     &p.algo, st.workspace, kLtWorkspaceBytes, stream);
  if (rc == CUBLAS_STATUS_SUCCESS) return true;
  // A refusal of the algorithm the heuristic picked: the caller's way from now on.
  if (rc != CUBLAS_STATUS_NOT_SUPPORTED && rc != CUBLAS_STATUS_INVALID_VALUE) LS_CHECK_CUBLAS(rc);
  p.usable = false;
  return false;
}

}  // namespace

bool gemm_bf16_bias_out_cuda(const GemmShape& s, const uint16_t* a, const uint16_t* b,
                             const uint16_t* bias16, uint16_t* c16, cudaStream_t stream) {
  if (bias16 == nullptr) throw std::invalid_argument("gemm_bf16_bias_out_cuda: no bias16");
  return lt_bf16_out(LtEpilogue::bias16, s, a, b, bias16, c16, nullptr, stream,
                     "gemm_bf16_bias_out_cuda");
}

bool gemm_bf16_dgelu_out_cuda(const GemmShape& s, const uint16_t* a, const uint16_t* b,
                              const uint16_t* pre16, uint16_t* c16, cudaStream_t stream) {
  if (pre16 == nullptr) throw std::invalid_argument("gemm_bf16_dgelu_out_cuda: no pre16");
  return lt_bf16_out(LtEpilogue::dgelu, s, a, b, nullptr, c16, const_cast<uint16_t*>(pre16), stream,
                     "gemm_bf16_dgelu_out_cuda");
}

bool gemm_bf16_bias_gelu_cuda(const GemmShape& s, const uint16_t* a, const uint16_t* b,
                              const uint16_t* bias16, uint16_t* y16, uint16_t* pre16,
                              cudaStream_t stream) {
  if (pre16 == nullptr || bias16 == nullptr)
    throw std::invalid_argument("gemm_bf16_bias_gelu_cuda: no pre16 or no bias16");
  return lt_bf16_out(LtEpilogue::gelu, s, a, b, bias16, y16, pre16, stream,
                     "gemm_bf16_bias_gelu_cuda");
}

std::vector<float> gemm_bf16_lt_algorithm_times_cuda(const GemmShape& s, const uint16_t* a,
                                                     const uint16_t* b, uint16_t* c16,
                                                     int max_algorithms, int launches,
                                                     cudaStream_t stream) {
  prepare(s, "gemm_bf16_lt_algorithm_times_cuda");
  if (s.alpha != 1.0f || s.beta != 0.0f || max_algorithms < 1 || launches < 1)
    throw std::invalid_argument(
        "gemm_bf16_lt_algorithm_times_cuda: alpha must be 1, beta 0, max_algorithms and launches "
        "1 or more");
  if (s.m == 0 || s.n == 0) return {};
  LtState& st = lt_state();
  constexpr int kMostOffers = 32;
  cublasLtMatmulHeuristicResult_t offers[kMostOffers] = {};
  int offered = std::min(max_algorithms, kMostOffers);
  LtPlan p = make_plan(st, s, LtEpilogue::none16, alignment(a), alignment(b), alignment(c16),
                       nullptr, nullptr, offers, &offered);
  cudaEvent_t start = cuda_timing_event_create(), stop = cuda_timing_event_create();
  std::vector<float> times;
  const float zero = 0.0f;
  for (int i = 0; i < offered; ++i) {
    const cublasLtMatmulAlgo_t* algo = &offers[i].algo;
    // One untimed launch (the kernel loaded, a refusal found) before the timed ones.
    if (offers[i].state != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmul(st.handle, p.desc, &s.alpha, b, p.a, a, p.b, &zero, c16, p.c, c16, p.c, algo,
                       st.workspace, kLtWorkspaceBytes, stream) != CUBLAS_STATUS_SUCCESS) {
      times.push_back(-1.0f);
      continue;
    }
    cuda_event_record(start, stream);
    for (int l = 0; l < launches; ++l)
      LS_CHECK_CUBLAS(cublasLtMatmul(st.handle, p.desc, &s.alpha, b, p.a, a, p.b, &zero, c16, p.c,
                                     c16, p.c, algo, st.workspace, kLtWorkspaceBytes, stream));
    cuda_event_record(stop, stream);
    cuda_event_synchronize(stop);
    times.push_back(cuda_event_elapsed_ms(start, stop) / static_cast<float>(launches));
  }
  cuda_event_destroy(stop);
  cuda_event_destroy(start);
  cublasLtMatrixLayoutDestroy(p.c);
  cublasLtMatrixLayoutDestroy(p.b);
  cublasLtMatrixLayoutDestroy(p.a);
  cublasLtMatmulDescDestroy(p.desc);
  return times;
}

}  // namespace lockstep::kernels
