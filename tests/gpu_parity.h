// Shared by the CUDA-vs-CPU parity tests (kernels_parity_gpu_test, kernels_bf16_gpu_test): device
// copies of host vectors, seeded random inputs, a closeness check scaled to the result, and the
// fixture that skips, with the reason, where no GPU answers or the build has no CUDA.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/cast.h"
#include "kernels/conv/conv2d.h"
#include "kernels/cuda/info.h"
#include "kernels/cuda/memory.h"
#include "kernels/dense.h"

namespace lockstep::testing_util {

using Floats = std::vector<float>;

// A device copy of a host vector. The copies go through the legacy default stream, which waits for
// the tests' (blocking) stream; the tests still sync their stream before reading, to say so.
template <class T>
class DeviceArray {
 public:
  explicit DeviceArray(const std::vector<T>& host)
      : n_(host.size()), ptr_(static_cast<T*>(kernels::cuda_alloc(n_ * sizeof(T)))) {
    upload(host);
  }
  explicit DeviceArray(size_t n) : DeviceArray(std::vector<T>(n)) {}
  ~DeviceArray() { kernels::cuda_free(ptr_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  T* get() const { return ptr_; }
  void upload(const std::vector<T>& host) {
    kernels::cuda_copy_to_device(ptr_, host.data(), n_ * sizeof(T));
  }
  std::vector<T> download() const {
    std::vector<T> host(n_);
    kernels::cuda_copy_to_host(host.data(), ptr_, n_ * sizeof(T));
    return host;
  }

 private:
  size_t n_;
  T* ptr_;
};

inline Floats random_floats(size_t n, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  Floats v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Each element within rtol * (|want| + max|want|): the second term judges elements that cancel to
// near zero on the scale of the whole result, as a different summation order would move them.
// Element i passes when |got - want| <= rtol * (|want[i]| + max |want|) + atol: relative to the
// result's scale, plus an absolute floor for results that are differences of much larger terms.
// The bf16 words of each element (cast.h's rounding, what the GPU kernels write).
inline std::vector<uint16_t> bf16_words(const Floats& v) {
  std::vector<uint16_t> words(v.size());
  kernels::cast_f32_to_bf16_cpu(v.data(), words.data(), v.size());
  return words;
}

inline testing::AssertionResult close(const Floats& got, const Floats& want, double rtol,
                                      double atol = 0) {
  if (got.size() != want.size())
    return testing::AssertionFailure() << "size " << got.size() << " != " << want.size();
  double scale = 0;
  for (float w : want) scale = std::max(scale, std::fabs(static_cast<double>(w)));
  size_t bad = 0, first = 0;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    const bool ok = err <= rtol * (std::fabs(static_cast<double>(want[i])) + scale) + atol;
    if (!ok && bad++ == 0) first = i;
    worst = std::max(worst, err);
  }
  if (bad == 0) return testing::AssertionSuccess();
  return testing::AssertionFailure() << bad << " of " << got.size() << " elements differ; first at "
                                     << first << ": " << got[first] << " vs " << want[first]
                                     << "; worst abs error " << worst << ", scale " << scale;
}

// Dense shapes both parity tests cover; the last is the CNN's classifier at batch 64 (7*7*64 in).
inline const std::vector<kernels::DenseShape>& parity_dense_shapes() {
  static const std::vector<kernels::DenseShape> shapes = {
      {1, 1, 1}, {33, 17, 5}, {16, 784, 10}, {128, 64, 128}, {64, 3136, 10}};
  return shapes;
}

// "batch=33 in=17 out=5 bias=1", for SCOPED_TRACE.
inline std::string describe(const kernels::DenseShape& s, bool bias) {
  return "batch=" + std::to_string(s.batch) + " in=" + std::to_string(s.in) +
         " out=" + std::to_string(s.out) + " bias=" + std::to_string(bias);
}

// Convolution geometries both parity tests cover: odd sizes, strides, rectangular kernels with
// uneven padding, and the CNN's two layers.
inline const std::vector<kernels::Conv2dShape>& parity_conv_shapes() {
  static const std::vector<kernels::Conv2dShape> shapes = {
      {.n = 2, .h = 5, .w = 5, .c_in = 1, .c_out = 3},
      {.n = 3, .h = 8, .w = 7, .c_in = 4, .c_out = 8, .stride = 2},
      {.n = 2,
       .h = 9,
       .w = 6,
       .c_in = 3,
       .c_out = 5,
       .kh = 5,
       .kw = 2,
       .stride = 3,
       .pad_h = 2,
       .pad_w = 0},
      {.n = 8, .h = 28, .w = 28, .c_in = 1, .c_out = 32},
      {.n = 4, .h = 14, .w = 14, .c_in = 32, .c_out = 64},
  };
  return shapes;
}

// One convolution case's random operands (dw0 and db0: the non-zero gradients a backward pass
// accumulates onto), and the CPU twin's results on them, the oracle.
struct ConvCase {
  Floats x, w, b, dy, dw0, db0;
  ConvCase(const kernels::Conv2dShape& s, std::mt19937& rng)
      : x(random_floats(size_t(s.n) * s.h * s.w * s.c_in, rng)),
        w(random_floats(size_t(s.kh) * s.kw * s.c_in * s.c_out, rng)),
        b(random_floats(s.c_out, rng)),
        dy(random_floats(size_t(s.n) * s.out_h() * s.out_w() * s.c_out, rng)),
        dw0(random_floats(w.size(), rng)),
        db0(random_floats(b.size(), rng)) {}
};
struct ConvResult {
  Floats y, dx, dw, db;
};
// conv2d_forward_cpu and conv2d_backward_cpu on (x, w, dy) as given (a caller passes them
// rounded for a bf16 oracle), b, and the case's dw0 and db0; dx is left empty when !with_dx.
inline ConvResult cpu_conv(const kernels::Conv2dShape& s, const ConvCase& c, const Floats& x,
                           const Floats& w, const Floats& dy, bool with_dx = true) {
  ConvResult r{Floats(c.dy.size()), with_dx ? Floats(c.x.size()) : Floats(), c.dw0, c.db0};
  Floats work(kernels::conv2d_workspace_floats(s));
  kernels::conv2d_forward_cpu(s, x.data(), w.data(), c.b.data(), r.y.data(), work.data());
  kernels::conv2d_backward_cpu(s, x.data(), w.data(), dy.data(), with_dx ? r.dx.data() : nullptr,
                               r.dw.data(), r.db.data(), work.data());
  return r;
}
inline ConvResult cpu_conv(const kernels::Conv2dShape& s, const ConvCase& c, bool with_dx = true) {
  return cpu_conv(s, c, c.x, c.w, c.dy, with_dx);
}

// "n=2 5x5x1 -> 3 k=3x3 stride=1", for SCOPED_TRACE.
inline std::string describe(const kernels::Conv2dShape& s) {
  return "n=" + std::to_string(s.n) + " " + std::to_string(s.h) + "x" + std::to_string(s.w) + "x" +
         std::to_string(s.c_in) + " -> " + std::to_string(s.c_out) + " k=" + std::to_string(s.kh) +
         "x" + std::to_string(s.kw) + " stride=" + std::to_string(s.stride);
}

class GpuParity : public testing::Test {
 protected:
  void SetUp() override {
    std::string reason;
    if (kernels::cuda_device_count_or_reason(&reason) <= 0)
      GTEST_SKIP() << "CUDA kernels cannot be tested here: " << reason;
    stream_ = kernels::cuda_stream_create();
  }
  void TearDown() override { kernels::cuda_stream_destroy(stream_); }
  void sync() { kernels::cuda_stream_synchronize(stream_); }

  cudaStream_t stream_ = nullptr;
  std::mt19937 rng_{20240611};
};

}  // namespace lockstep::testing_util
