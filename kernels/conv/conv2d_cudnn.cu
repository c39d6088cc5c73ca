#include <cudnn.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cast.h"
#include "kernels/conv/conv2d.h"
#include "kernels/cuda/bf16.cuh"
#include "kernels/cuda/bias.cuh"
#include "kernels/cuda/launch.cuh"

// The cuDNN twins of the CUDA convolution (conv2d.h). cuDNN's legacy convolution API (deprecated in
// cuDNN 9, still shipped and used by PyTorch's convolutions): NHWC tensors, and filters in KRSC
// order (c_out, kh, kw, c_in), which is the transpose of the HWIO weight matrix [K, c_out] with
// K = kh * kw * c_in; the layer keeps that copy (conv2d_weights_krsc_*), and the filter gradient is
// added back into HWIO by the same transpose.
//
// Per (thread, CUDA device): a cuDNN handle, bound to the caller's stream on every call, and per
// shape and precision a plan: the descriptors and, at each direction's first use, its algorithms
// as cuDNN times them there (cudnnFind*AlgorithmEx, on the call's own buffers and workspace),
// fastest first, among those that fit the workspace budget and, in fp32, do not use the tensor
// cores (no TF32: the fp32 contract is fp32 FMA, as cuBLAS's default math in gemm.cu): the
// deterministic ones first, the others after them for a shape that has none; with
// LOCKSTEP_CUDNN_DETERMINISTIC=0, cuDNN's time order alone. The first that runs is kept. A
// non-deterministic algorithm (atomic additions: on an H100 the second CNN convolution's filter
// gradient took 0.42 ms that way against 0.65 ms for the fastest deterministic one, at batch 1024
// in fp32) changes the last bits of a rank's gradient from run to run (so a filter gradient
// computed twice differs), not the replicas' agreement: every rank applies the same all-reduced
// sum. Timing rather than cuDNN's heuristics, which on an H200 chose
// algorithms slower than im2col + cuBLAS for the CNN's layers (docs/PERFORMANCE.md); the price is
// that two runs may choose differently where two algorithms time alike (their sums differ in
// order, as with PyTorch's cudnn.benchmark).
//
// The workspace budget is the larger of the im2col twin's column matrix (rows * cols floats,
// linear in the batch) and 64 MiB: it grows with the batch, so the workspace a model sizes for its
// largest batch covers every smaller one.

namespace lockstep::kernels {

namespace {

[[noreturn]] void throw_cudnn(const char* call, cudnnStatus_t code, const char* file, int line) {
  throw std::runtime_error(std::string(call) + " failed: " + cudnnGetErrorString(code) + " at " +
                           file + ":" + std::to_string(line));
}

#define LS_CHECK_CUDNN(call)                                \
  do {                                                      \
    const cudnnStatus_t ls_cudnn_rc_ = (call);              \
    if (ls_cudnn_rc_ != CUDNN_STATUS_SUCCESS)               \
      throw_cudnn(#call, ls_cudnn_rc_, __FILE__, __LINE__); \
  } while (0)

int current_device() {
  int device = 0;
  LS_CHECK_CUDA(cudaGetDevice(&device));
  return device;
}

// Handles live until the process exits (see cublas_handle.h for why not a thread_local destructor).
cudnnHandle_t cudnn_handle(cudaStream_t stream) {
  thread_local std::map<int, cudnnHandle_t> handles;
  cudnnHandle_t& h = handles[current_device()];
  if (h == nullptr) LS_CHECK_CUDNN(cudnnCreate(&h));
  LS_CHECK_CUDNN(cudnnSetStream(h, stream));
  return h;
}

// Sections of a workspace, each starting on a 256-byte boundary.
constexpr size_t kAlignFloats = 64;
// cuDNN's workspace: the im2col column matrix, and at least 64 MiB (a few algorithms of small
// layers need more than their column matrix); max(linear in the batch, constant) still grows with
// the batch.
constexpr size_t kFloorFloats = size_t{16} << 20;
size_t aligned(size_t floats) { return (floats + kAlignFloats - 1) / kAlignFloats * kAlignFloats; }

struct Layout {
  size_t cudnn_bytes = 0;                      // the algorithms' budget, first
  size_t x16 = 0, y16 = 0, dw = 0, total = 0;  // float offsets of the scratch after it
};

Layout layout_of(const Conv2dShape& s, const Conv2dGeometry& g, bool bf16) {
  Layout l;
  const size_t budget = std::max(aligned(g.rows * g.cols), kFloorFloats);
  l.cudnn_bytes = budget * sizeof(float);
  const size_t k = g.cols * static_cast<size_t>(s.c_out);  // filter values
  if (bf16) {
    const size_t x_n = static_cast<size_t>(s.n) * s.h * s.w * s.c_in;
    l.x16 = budget;
    l.y16 = l.x16 + aligned((x_n + 1) / 2);
    l.dw = l.y16 + aligned((g.rows * s.c_out + 1) / 2);
    l.total = l.dw + aligned((k + 1) / 2);
  } else {
    l.dw = budget;
    l.total = l.dw + aligned(k);
  }
  return l;
}

// One direction's algorithms, fastest first: the deterministic ones first, then (only
// where cuDNN offers no deterministic one that runs) the others; each with its math type and
// workspace. `next` is the first not known to fail: a candidate that cuDNN refuses at its first
// run (BAD_PARAM or NOT_SUPPORTED, which its timing should have caught already) is
// passed over, once.
struct Candidate {
  int algo;
  cudnnMathType_t math;
  size_t bytes;
  bool deterministic;
};
struct Choice {
  bool listed = false;
  std::vector<Candidate> candidates;
  size_t next = 0;
  std::string refused;  // what was passed over, for the error when nothing runs
};

struct Plan {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  size_t budget = 0;
  Choice fwd, data, filter;
  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    if (x) cudnnDestroyTensorDescriptor(x);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
  }
};

std::string describe(const Conv2dShape& s, bool bf16) {
  return std::to_string(s.n) + "x" + std::to_string(s.h) + "x" + std::to_string(s.w) + "x" +
         std::to_string(s.c_in) + " -> " + std::to_string(s.c_out) + " channels, kernel " +
         std::to_string(s.kh) + "x" + std::to_string(s.kw) + ", stride " +
         std::to_string(s.stride) + ", padding " + std::to_string(s.pad_h) + "/" +
         std::to_string(s.pad_w) + (bf16 ? ", bf16" : ", fp32");
}

bool refused(cudnnStatus_t rc) {
  if (rc == CUDNN_STATUS_BAD_PARAM || rc == CUDNN_STATUS_NOT_SUPPORTED) return true;
#if CUDNN_MAJOR >= 9
  const int family = static_cast<int>(rc) / 1000;  // cuDNN 9's sub-codes: 2xxx and 3xxx
  return family == 2 || family == 3;
#else
  return false;
#endif
}

// cuDNN's deterministic algorithms first (the same bits run after run where the same algorithms
// are chosen), unless set_cudnn_deterministic_first(false) said otherwise.
std::atomic<bool> deterministic_first_now{true};
bool deterministic_first() { return deterministic_first_now.load(std::memory_order_relaxed); }

// cuDNN's timed answers (perf[0, count), fastest first) that the plan may use.
template <class Perf>
void list_candidates(Choice& c, const Perf* perf, int count, bool bf16, size_t budget) {
  std::vector<Candidate> others;
  for (int i = 0; i < count; ++i) {
    const Perf& p = perf[i];
    if (p.status != CUDNN_STATUS_SUCCESS || p.memory > budget) continue;
    // fp32 means fp32 FMA: no TF32 (or fp16) conversion on the tensor cores.
    if (!bf16 &&
        (p.mathType == CUDNN_TENSOR_OP_MATH || p.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION))
      continue;
    const Candidate cand{static_cast<int>(p.algo), bf16 ? p.mathType : CUDNN_FMA_MATH, p.memory,
                         p.determinism == CUDNN_DETERMINISTIC};
    (cand.deterministic || !deterministic_first() ? c.candidates : others).push_back(cand);
  }
  c.candidates.insert(c.candidates.end(), others.begin(), others.end());
  c.listed = true;
}

// Runs the direction's first candidate that cuDNN accepts: call(algo, workspace bytes).
template <class Call>
void run_choice(Choice& c, const Plan& p, const char* direction, const Conv2dShape& s, bool bf16,
                Call call) {
  for (; c.next < c.candidates.size(); ++c.next) {
    const Candidate& cand = c.candidates[c.next];
    LS_CHECK_CUDNN(cudnnSetConvolutionMathType(p.conv, cand.math));
    const cudnnStatus_t rc = call(cand.algo, cand.bytes);
    if (rc == CUDNN_STATUS_SUCCESS) return;
    if (!refused(rc)) throw_cudnn(direction, rc, __FILE__, __LINE__);
    c.refused += " algorithm " + std::to_string(cand.algo) + " (" + cudnnGetErrorString(rc) + ")";
  }
  throw std::runtime_error(
      std::string("cuDNN has no ") + direction + " convolution for " + describe(s, bf16) +
      " within a workspace of " + std::to_string(p.budget) + " bytes" +
      (c.refused.empty() ? std::string(" (none of its timed algorithms qualified)")
                         : "; refused:" + c.refused) +
      ". LOCKSTEP_CUDA_CONV=im2col runs the convolutions without cuDNN");
}

std::unique_ptr<Plan> make_plan(const Conv2dShape& s, const Conv2dGeometry& g, bool bf16) {
  auto p = std::make_unique<Plan>();
  const cudnnDataType_t type = bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
  LS_CHECK_CUDNN(cudnnCreateTensorDescriptor(&p->x));
  LS_CHECK_CUDNN(cudnnCreateTensorDescriptor(&p->y));
  LS_CHECK_CUDNN(cudnnCreateFilterDescriptor(&p->w));
  LS_CHECK_CUDNN(cudnnCreateConvolutionDescriptor(&p->conv));
  LS_CHECK_CUDNN(cudnnSetTensor4dDescriptor(p->x, CUDNN_TENSOR_NHWC, type, s.n, s.c_in, s.h, s.w));
  LS_CHECK_CUDNN(
      cudnnSetTensor4dDescriptor(p->y, CUDNN_TENSOR_NHWC, type, s.n, s.c_out, g.out_h, g.out_w));
  LS_CHECK_CUDNN(
      cudnnSetFilter4dDescriptor(p->w, type, CUDNN_TENSOR_NHWC, s.c_out, s.c_in, s.kh, s.kw));
  // Cross-correlation, as the im2col twins compute; fp32 accumulation in both precisions.
  LS_CHECK_CUDNN(cudnnSetConvolution2dDescriptor(p->conv, s.pad_h, s.pad_w, s.stride, s.stride, 1,
                                                 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  LS_CHECK_CUDNN(
      cudnnSetConvolutionMathType(p->conv, bf16 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH));
  int n = 0, c = 0, oh = 0, ow = 0;
  LS_CHECK_CUDNN(cudnnGetConvolution2dForwardOutputDim(p->conv, p->x, p->w, &n, &c, &oh, &ow));
  if (oh != g.out_h || ow != g.out_w)
    throw std::logic_error("cuDNN's output " + std::to_string(oh) + "x" + std::to_string(ow) +
                           " differs from the im2col twin's for " + describe(s, bf16));
  p->budget = layout_of(s, g, bf16).cudnn_bytes;
  return p;
}

// The calling thread's plan for (device, shape, precision), made on first use; each direction's
// algorithms are listed at its first use (a first layer never asks for dx).
Plan& plan_for(const Conv2dShape& s, const Conv2dGeometry& g, bool bf16) {
  using Key = std::array<int, 12>;
  thread_local std::map<Key, std::unique_ptr<Plan>> plans;
  const Key key{current_device(), s.n,     s.h,     s.w,         s.c_in, s.c_out, s.kh, s.kw,
                s.stride,         s.pad_h, s.pad_w, bf16 ? 1 : 0};
  std::unique_ptr<Plan>& p = plans[key];
  if (!p) p = make_plan(s, g, bf16);
  return *p;
}

// The filter as a [K, c_out] matrix (HWIO) and as [c_out, K] (KRSC) are transposes of each other.
template <class T>
__global__ void to_krsc_kernel(const float* __restrict__ w, T* __restrict__ wk, size_t k, int c_out,
                               size_t total) {
  for (size_t i = cuda::thread_index(); i < total; i += cuda::thread_stride()) {
    const size_t co = i / k, r = i - co * k;
    const float v = w[r * c_out + co];
    if constexpr (sizeof(T) == 2)
      wk[i] = cuda::to_bf16(v);
    else
      wk[i] = v;
  }
}

template <class T>
__global__ void add_from_krsc_kernel(const T* __restrict__ dwk, float* __restrict__ dw, size_t k,
                                     int c_out, size_t total) {
  for (size_t i = cuda::thread_index(); i < total; i += cuda::thread_stride()) {
    const size_t r = i / c_out, co = i - r * c_out;
    const T v = dwk[co * k + r];
    if constexpr (sizeof(T) == 2)
      dw[i] += cuda::from_bf16(v);
    else
      dw[i] += v;
  }
}

// y[r, c] = (relu?) (src[r, c] + b[c]), src fp32 (may be y itself) or bf16.
template <class T>
__global__ void bias_epilogue_kernel(const T* src, const float* __restrict__ b, float* y, int cols,
                                     bool relu, size_t total) {
  for (size_t i = cuda::thread_index(); i < total; i += cuda::thread_stride()) {
    float v;
    if constexpr (sizeof(T) == 2)
      v = cuda::from_bf16(src[i]);
    else
      v = src[i];
    if (b != nullptr) v += b[i % cols];
    y[i] = relu ? fmaxf(v, 0.0f) : v;
  }
}

template <class T>
void to_krsc(const Conv2dShape& s, const float* w, T* wk, cudaStream_t stream) {
  const size_t k = size_t(s.kh) * s.kw * s.c_in, total = k * s.c_out;
  if (total == 0) return;
  to_krsc_kernel<<<cuda::grid_for(total), cuda::kThreads, 0, stream>>>(w, wk, k, s.c_out, total);
  LS_CHECK_LAUNCH("to_krsc_kernel");
}

template <class T>
void add_from_krsc(const Conv2dShape& s, const T* dwk, float* dw, cudaStream_t stream) {
  const size_t k = size_t(s.kh) * s.kw * s.c_in, total = k * s.c_out;
  add_from_krsc_kernel<<<cuda::grid_for(total), cuda::kThreads, 0, stream>>>(dwk, dw, k, s.c_out,
                                                                             total);
  LS_CHECK_LAUNCH("add_from_krsc_kernel");
}

template <class T>
void bias_epilogue(const Conv2dShape& s, const Conv2dGeometry& g, const T* src, const float* b,
                   float* y, cudaStream_t stream) {
  const size_t total = g.rows * static_cast<size_t>(s.c_out);
  bias_epilogue_kernel<<<cuda::grid_for(total), cuda::kThreads, 0, stream>>>(src, b, y, s.c_out,
                                                                             s.relu, total);
  LS_CHECK_LAUNCH("bias_epilogue_kernel");
}

// Both precisions: T is the tensors' element (float, or uint16_t bf16 words).
template <class T>
struct Pass {
  static constexpr bool kBf16 = sizeof(T) == 2;
  const Conv2dShape& s;
  Conv2dGeometry g;
  cudnnHandle_t h;
  Plan& p;
  Layout l;
  float* workspace;
  Pass(const Conv2dShape& shape, const char* who, float* ws, cudaStream_t stream)
      : s(shape),
        g(conv2d_geometry(shape, who)),
        h(cudnn_handle(stream)),
        p(plan_for(s, g, kBf16)),
        l(layout_of(s, g, kBf16)),
        workspace(ws) {}
  T* scratch(size_t offset) const { return reinterpret_cast<T*>(workspace + offset); }

  // One direction: its algorithms listed at the first call (find(perf, capacity, &count): cuDNN
  // times them on this call's buffers), then the first that runs (run(algo, workspace bytes)).
  template <class Perf, int kCapacity, class Find, class Run>
  void direction(Choice& c, const char* name, const Find& find, const Run& run) const {
    if (!c.listed) {
      int count = 0;
      Perf perf[kCapacity];
      LS_CHECK_CUDNN(find(perf, kCapacity, &count));
      list_candidates(c, perf, count, kBf16, p.budget);
    }
    run_choice(c, p, name, s, kBf16, run);
  }

  void forward(const T* x, const T* wk, T* y) const {
    const float one = 1.0f, zero = 0.0f;
    direction<cudnnConvolutionFwdAlgoPerf_t, CUDNN_CONVOLUTION_FWD_ALGO_COUNT>(
        p.fwd, "forward",
        [&](auto* perf, int capacity, int* count) {
          return cudnnFindConvolutionForwardAlgorithmEx(h, p.x, x, p.w, wk, p.conv, p.y, y,
                                                        capacity, count, perf, workspace, p.budget);
        },
        [&](int algo, size_t bytes) {
          return cudnnConvolutionForward(h, &one, p.x, x, p.w, wk, p.conv,
                                         static_cast<cudnnConvolutionFwdAlgo_t>(algo), workspace,
                                         bytes, &zero, p.y, y);
        });
  }
  void filter(const T* x, const T* dy, T* dwk) const {
    const float one = 1.0f, zero = 0.0f;
    direction<cudnnConvolutionBwdFilterAlgoPerf_t, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT>(
        p.filter, "backward-filter",
        [&](auto* perf, int capacity, int* count) {
          return cudnnFindConvolutionBackwardFilterAlgorithmEx(
              h, p.x, x, p.y, dy, p.conv, p.w, dwk, capacity, count, perf, workspace, p.budget);
        },
        [&](int algo, size_t bytes) {
          return cudnnConvolutionBackwardFilter(h, &one, p.x, x, p.y, dy, p.conv,
                                                static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo),
                                                workspace, bytes, &zero, p.w, dwk);
        });
  }
  void data(const T* wk, const T* dy, T* dx) const {
    const float one = 1.0f, zero = 0.0f;
    direction<cudnnConvolutionBwdDataAlgoPerf_t, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT>(
        p.data, "backward-data",
        [&](auto* perf, int capacity, int* count) {
          return cudnnFindConvolutionBackwardDataAlgorithmEx(
              h, p.w, wk, p.y, dy, p.conv, p.x, dx, capacity, count, perf, workspace, p.budget);
        },
        [&](int algo, size_t bytes) {
          return cudnnConvolutionBackwardData(h, &one, p.w, wk, p.y, dy, p.conv,
                                              static_cast<cudnnConvolutionBwdDataAlgo_t>(algo),
                                              workspace, bytes, &zero, p.x, dx);
        });
  }
};

}  // namespace

bool conv2d_cudnn_available() { return true; }
void set_cudnn_deterministic_first(bool first) { deterministic_first_now = first; }

size_t conv2d_cudnn_workspace_floats(const Conv2dShape& s, bool bf16) {
  return layout_of(s, conv2d_geometry(s, "conv2d_cudnn_workspace_floats"), bf16).total;
}

void conv2d_weights_krsc_cuda(const Conv2dShape& s, const float* w, float* wk,
                              cudaStream_t stream) {
  to_krsc(s, w, wk, stream);
}
void conv2d_weights_krsc_bf16_cuda(const Conv2dShape& s, const float* w, uint16_t* wk,
                                   cudaStream_t stream) {
  to_krsc(s, w, wk, stream);
}

void conv2d_forward_cudnn(const Conv2dShape& s, const float* x, const float* wk, const float* b,
                          float* y, float* workspace, cudaStream_t stream) {
  const Conv2dGeometry g = conv2d_geometry(s, "conv2d_forward_cudnn");
  if (g.rows == 0) return;
  const Pass<float> pass(s, "conv2d_forward_cudnn", workspace, stream);
  pass.forward(x, wk, y);
  if (b != nullptr || s.relu) bias_epilogue(s, g, y, b, y, stream);
}

void conv2d_backward_cudnn(const Conv2dShape& s, const float* x, const float* wk, const float* dy,
                           float* dx, float* dw, float* db, float* workspace, cudaStream_t stream) {
  const Conv2dGeometry g = conv2d_geometry(s, "conv2d_backward_cudnn");
  if (g.rows == 0) return;
  const Pass<float> pass(s, "conv2d_backward_cudnn", workspace, stream);
  if (dw != nullptr) {
    float* dwk = pass.scratch(pass.l.dw);
    pass.filter(x, dy, dwk);
    add_from_krsc(s, dwk, dw, stream);
  }
  if (db != nullptr) cuda::add_column_sums(dy, g.rows, s.c_out, db, stream);
  if (dx != nullptr) pass.data(wk, dy, dx);
}

void conv2d_forward_bf16_cudnn(const Conv2dShape& s, const float* x, const uint16_t* wk16,
                               const float* b, float* y, float* workspace, cudaStream_t stream) {
  const Conv2dGeometry g = conv2d_geometry(s, "conv2d_forward_bf16_cudnn");
  if (g.rows == 0) return;
  const Pass<uint16_t> pass(s, "conv2d_forward_bf16_cudnn", workspace, stream);
  uint16_t* x16 = pass.scratch(pass.l.x16);
  uint16_t* y16 = pass.scratch(pass.l.y16);
  cast_f32_to_bf16_cuda(x, x16, static_cast<size_t>(s.n) * s.h * s.w * s.c_in, stream);
  pass.forward(x16, wk16, y16);
  bias_epilogue(s, g, y16, b, y, stream);
}

void conv2d_backward_bf16_cudnn(const Conv2dShape& s, const float* x, const uint16_t* wk16,
                                const float* dy, float* dx, float* dw, float* db, float* workspace,
                                cudaStream_t stream) {
  const Conv2dGeometry g = conv2d_geometry(s, "conv2d_backward_bf16_cudnn");
  if (g.rows == 0) return;
  const Pass<uint16_t> pass(s, "conv2d_backward_bf16_cudnn", workspace, stream);
  const size_t x_n = static_cast<size_t>(s.n) * s.h * s.w * s.c_in;
  uint16_t* x16 = pass.scratch(pass.l.x16);  // then dx16, once the filter gradient has read it
  uint16_t* dy16 = pass.scratch(pass.l.y16);
  if (dw != nullptr || dx != nullptr)
    cast_f32_to_bf16_cuda(dy, dy16, g.rows * static_cast<size_t>(s.c_out), stream);
  if (dw != nullptr) {
    uint16_t* dwk16 = pass.scratch(pass.l.dw);
    cast_f32_to_bf16_cuda(x, x16, x_n, stream);
    pass.filter(x16, dy16, dwk16);
    add_from_krsc(s, dwk16, dw, stream);
  }
  if (db != nullptr) cuda::add_column_sums(dy, g.rows, s.c_out, db, stream);
  if (dx != nullptr) {
    pass.data(wk16, dy16, x16);
    cast_bf16_to_f32_cuda(x16, dx, x_n, stream);
  }
}

}  // namespace lockstep::kernels
