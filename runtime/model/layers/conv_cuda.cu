// The CUDA twin of the convolution layer (conv.cpp): the same shapes and contract, computed on the
// model's stream over device memory by up to three families of kernels (kernels/conv/conv2d.h):
// im2col + cuBLAS (conv2d_*_cuda); in a build with cuDNN, cuDNN (conv2d_*_cudnn); and, for a
// layer with few taps per output such as a first layer on images, direct kernels (forward and
// filter gradient: conv2d_*_direct_cuda). With Precision::bf16 all compute in bf16 with fp32
// accumulation (cuda_layer.h: the weight copy).
//
// No family wins everywhere: on an H200 (docs/PERFORMANCE.md) cuDNN ran the CNN's second
// convolution up to 6x faster at batch 1024 in bf16, and im2col + cuBLAS its first one's filter
// gradient (one input channel) 4-9x faster. So each layer times the families for each of its
// three directions (forward; filter and bias gradient; input gradient) at the first step of a
// batch size, and keeps the cheapest (a tuned direction costs one synchronisation and a few extra
// runs, once; the filter gradient is timed into scratch, as it accumulates); once a batch size's
// choices are settled, its forward refreshes only the weight copies they read. LOCKSTEP_CUDA_CONV
// pins one family: im2col or cudnn. The choices, with their times, are logged at debug level
// (LOCKSTEP_LOG_LEVEL=debug). Two runs may choose differently where two families time alike;
// their results then differ in summation order only. Where the training steps are replayed from
// CUDA graphs (CudaLayerPlacement::graphs) a family's cost is its device time alone.
// A first convolution that the plan fused with the max-pool after it
// (LOCKSTEP_CUDA_CONV_POOL=fused) is a layer of its own, CudaConvPool, on the fused kernels alone.
// Plain C++ over the kernels' launchers: it is a .cu only so that it is built with CUDA and
// conv_cuda_stub.cpp without.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>

#include "kernels/conv/conv_pool.h"
#include "kernels/cuda/memory.h"
#include "runtime/base/error.h"
#include "runtime/base/log.h"
#include "runtime/model/layers/conv.h"
#include "runtime/model/layers/cuda_layer.h"

namespace lockstep {
namespace {

enum class Family { im2col, cudnn, direct };
constexpr int kFamilies = 3;
const char* name(Family f) {
  return f == Family::cudnn ? "cudnn" : f == Family::direct ? "direct" : "im2col";
}

// Which families the layers may use: the placement's LOCKSTEP_CUDA_CONV (knobs.h; im2col or
// cudnn: that one alone), else all the build has (the direct kernels where a layer's shape suits
// them).
struct FamilyChoice {
  bool im2col = true, cudnn = false, direct = false;
};
FamilyChoice family_choice(const Knobs& knobs) {
  const bool built = kernels::conv2d_cudnn_available();
  switch (knobs.cuda_conv) {
    case CudaConvKnob::any: return {true, built, true};
    case CudaConvKnob::im2col: return {true, false, false};
    case CudaConvKnob::cudnn: break;
  }
  if (!built) throw UsageError("LOCKSTEP_CUDA_CONV=cudnn, but this build has no cuDNN");
  return {false, true, false};
}

// A batch size's choice per direction; unset until timed. Settled once its first backward pass
// has run: every direction its steps use is then chosen.
struct Directions {
  bool forward_set = false, filter_set = false, data_set = false, settled = false;
  Family forward = Family::im2col, filter = Family::im2col, data = Family::im2col;
  bool uses(Family f) const { return forward == f || filter == f || (data_set && data == f); }
};

// T: float, or uint16_t for bf16 compute.
template <class T>
class CudaConv2d : public CudaLayer {
 public:
  // bf16_params: the model's bf16 copy of its parameters, which the im2col family then reads.
  CudaConv2d(const LayerPlan& plan, cudaStream_t stream, FamilyChoice families, bool graphs,
             const Bf16Params* bf16_params = nullptr)
      : CudaLayer(plan, stream), families_(families), graphs_(graphs) {
    // The direct kernels take the first layers of image models (few taps per output).
    families_.direct = families_.direct && kernels::conv2d_direct_supported(conv2d_shape(plan, 1));
    const size_t weights = static_cast<size_t>(bias_offset(plan));
    if (families_.cudnn) wk_ = Buffer<T>(DeviceKind::cuda, weights);
    if (kBf16 && families_.im2col) w16_ = std::make_unique<Bf16Weights>(plan, bf16_params);
  }
  ~CudaConv2d() override {
    if (start_ != nullptr) kernels::cuda_event_destroy(start_);
    if (stop_ != nullptr) kernels::cuda_event_destroy(stop_);
  }

  size_t workspace_floats(int batch) const override {
    const kernels::Conv2dShape s = conv2d_shape(plan_, batch);
    size_t floats = 0;
    if (families_.im2col)
      floats =
          kBf16 ? kernels::conv2d_bf16_workspace_floats(s) : kernels::conv2d_workspace_floats(s);
    if (families_.cudnn)
      floats = std::max(floats, kernels::conv2d_cudnn_workspace_floats(s, kBf16));
    if (families_.direct) floats = std::max(floats, kernels::conv2d_direct_workspace_floats(s));
    return floats;
  }

  void forward(int batch, const float* x, float* y, float* workspace) override {
    const kernels::Conv2dShape s = conv2d_shape(plan_, batch);
    Directions& d = directions_[batch];
    // The weight copies that the step's directions read, rewritten at every forward (never
    // stale): both until the batch size's choices are settled, then those in use. The im2col
    // family's is the model's bf16 copy where it keeps one (nothing to write then).
    if (families_.cudnn && (!d.settled || d.uses(Family::cudnn))) {
      if constexpr (kBf16)
        kernels::conv2d_weights_krsc_bf16_cuda(s, params_, wk_.data(), stream_);
      else
        kernels::conv2d_weights_krsc_cuda(s, params_, wk_.data(), stream_);
    }
    if (w16_ && (!d.settled || d.uses(Family::im2col))) w16_->refresh(params_, stream_);
    const auto run = [&](Family f) { run_forward(f, s, x, y, workspace); };
    if (!d.forward_set) d.forward = fastest(s, "forward", run, true), d.forward_set = true;
    run(d.forward);
  }

  void backward(int batch, const float* x, const float*, const float* dy, float* dx,
                float* workspace) override {
    const kernels::Conv2dShape s = conv2d_shape(plan_, batch);
    float* db = grads_ + bias_offset(plan_);
    Directions& d = directions_[batch];
    if (!d.filter_set) {
      // Timed into scratch: the filter and bias gradients accumulate.
      if (scratch_.size() == 0) scratch_ = Buffer<float>(DeviceKind::cuda, plan_.params);
      float* dw_scratch = scratch_.data();
      d.filter = fastest(
          s, "filter gradient",
          [&](Family f) {
            run_backward(f, s, x, dy, nullptr, dw_scratch, dw_scratch + bias_offset(plan_),
                         workspace);
          },
          true);
      d.filter_set = true;
    }
    if (dx != nullptr && !d.data_set) {
      d.data = fastest(
          s, "input gradient",
          [&](Family f) { run_backward(f, s, x, dy, dx, nullptr, nullptr, workspace); }, false);
      d.data_set = true;
    }
    d.settled = true;
    if (dx == nullptr || d.filter == d.data) {
      run_backward(d.filter, s, x, dy, dx, grads_, db, workspace);
    } else {
      run_backward(d.filter, s, x, dy, nullptr, grads_, db, workspace);
      run_backward(d.data, s, x, dy, dx, nullptr, nullptr, workspace);
    }
  }

 private:
  static constexpr bool kBf16 = sizeof(T) == 2;
  static constexpr int kTimedRuns = 3;

  void run_forward(Family f, const kernels::Conv2dShape& s, const float* x, float* y,
                   float* workspace) {
    const float* b = params_ + bias_offset(plan_);
    if (f == Family::direct) {
      kernels::conv2d_forward_direct_cuda(s, x, params_, b, y, kBf16, stream_);
      return;
    }
    if constexpr (kBf16) {
      if (f == Family::cudnn)
        kernels::conv2d_forward_bf16_cudnn(s, x, wk_.data(), b, y, workspace, stream_);
      else
        kernels::conv2d_forward_bf16_cuda(s, x, w16_->get(), b, y, workspace, stream_);
    } else {
      if (f == Family::cudnn)
        kernels::conv2d_forward_cudnn(s, x, wk_.data(), b, y, workspace, stream_);
      else
        kernels::conv2d_forward_cuda(s, x, params_, b, y, workspace, stream_);
    }
  }

  void run_backward(Family f, const kernels::Conv2dShape& s, const float* x, const float* dy,
                    float* dx, float* dw, float* db, float* workspace) {
    if (f == Family::direct) {  // never chosen for dx (no direct input-gradient pass)
      if (dx != nullptr) throw Error("CudaConv2d: the direct kernels have no input gradient");
      kernels::conv2d_filter_direct_cuda(s, x, dy, dw, db, workspace, kBf16, stream_);
      return;
    }
    if constexpr (kBf16) {
      if (f == Family::cudnn)
        kernels::conv2d_backward_bf16_cudnn(s, x, wk_.data(), dy, dx, dw, db, workspace, stream_);
      else
        kernels::conv2d_backward_bf16_cuda(s, x, w16_->get(), dy, dx, dw, db, workspace, stream_);
    } else {
      if (f == Family::cudnn)
        kernels::conv2d_backward_cudnn(s, x, wk_.data(), dy, dx, dw, db, workspace, stream_);
      else
        kernels::conv2d_backward_cuda(s, x, params_, dy, dx, dw, db, workspace, stream_);
    }
  }

  // The family whose `run` costs least among those allowed (`direct_ok`: the direction has a
  // direct kernel). A run's cost is the larger of its device time and the host's time to enqueue
  // it (where the host is slower the device waits for it: cuDNN's calls cost more host time than
  // the kernels they replace), or its device time alone where the steps are replayed from CUDA
  // graphs (no host in between); the mean of 3 after one untimed run (in which cuDNN times its
  // own algorithms). Another family must beat im2col by 5%: a tie goes to im2col, whose fp32 layer
  // keeps no weight copy.
  template <class Run>
  Family fastest(const kernels::Conv2dShape& s, const char* direction, const Run& run,
                 bool direct_ok) {
    bool allowed[kFamilies] = {families_.im2col, families_.cudnn, families_.direct && direct_ok};
    if (allowed[0] + allowed[1] + allowed[2] == 1)
      return allowed[1] ? Family::cudnn : allowed[2] ? Family::direct : Family::im2col;
    if (start_ == nullptr) {
      start_ = kernels::cuda_timing_event_create();
      stop_ = kernels::cuda_timing_event_create();
    }
    double device_ms[kFamilies] = {}, host_ms[kFamilies] = {}, cost[kFamilies] = {};
    std::string report;
    for (int i = 0; i < kFamilies; ++i) {
      if (!allowed[i]) continue;
      const Family f = static_cast<Family>(i);
      if (i != 0 && allowed[0]) {
        // A family that refuses the shape (cuDNN with no algorithm for it, say) is passed over
        // while im2col remains.
        try {
          run(f);
        } catch (const std::exception& e) {
          allowed[i] = false;
          report += std::string(report.empty() ? "" : "; ") + name(f) + " refused: " + e.what();
          continue;
        }
      } else {
        run(f);
      }
      const auto begin = std::chrono::steady_clock::now();
      kernels::cuda_event_record(start_, stream_);
      for (int r = 0; r < kTimedRuns; ++r) run(f);
      kernels::cuda_event_record(stop_, stream_);
      host_ms[i] =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin)
              .count() /
          kTimedRuns;
      kernels::cuda_event_synchronize(stop_);
      device_ms[i] = kernels::cuda_event_elapsed_ms(start_, stop_) / kTimedRuns;
      cost[i] = graphs_ ? device_ms[i] : std::max(device_ms[i], host_ms[i]);
      report += std::string(report.empty() ? "" : "; ") + name(f) + " " +
                std::to_string(device_ms[i]) + " ms device, " + std::to_string(host_ms[i]) +
                " ms host";
    }
    int pick = allowed[0] ? 0 : -1;
    for (int i = 1; i < kFamilies; ++i) {
      if (!allowed[i]) continue;
      const bool beats_im2col = !allowed[0] || cost[i] < 0.95 * cost[0];
      if (beats_im2col && (pick < 0 || pick == 0 || cost[i] < cost[pick])) pick = i;
    }
    LS_LOG(debug) << "conv " << s.h << "x" << s.w << "x" << s.c_in << " -> " << s.c_out
                  << " at batch " << s.n << (kBf16 ? ", bf16" : ", fp32") << ", " << direction
                  << ": " << report << ": " << name(static_cast<Family>(pick));
    return static_cast<Family>(pick);
  }

  FamilyChoice families_;
  bool graphs_;   // steps replayed from CUDA graphs: the host's time does not count
  Buffer<T> wk_;  // the weights in cuDNN's KRSC order
  std::unique_ptr<Bf16Weights> w16_;  // bf16 HWIO, for the im2col family
  Buffer<float> scratch_;             // gradients written while the filter gradient is timed
  std::map<int, Directions> directions_;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

// A first convolution over one input channel with the max-pool (and ReLU) after it, fused
// (LOCKSTEP_CUDA_CONV_POOL=fused; plan_cuda in cpu_plan.h): the pooled output and a byte per value
// for its window position, then the filter and bias gradients from the pooled gradient
// (kernels/conv/conv_pool.h). The layer's activation buffer, sized for the convolution's output,
// holds the pooled one; the pool and ReLU layers are views. No input gradient (a first layer).
class CudaConvPool : public CudaLayer {
 public:
  CudaConvPool(const LayerPlan& plan, cudaStream_t stream, bool bf16)
      : CudaLayer(plan, stream), pool_(fused_pool(plan)), bf16_(bf16) {}

  void reserve(int max_batch) override {
    argmax_ = Buffer<int8_t>(DeviceKind::cuda, pooled_values(max_batch));
  }
  size_t workspace_floats(int batch) const override {
    return kernels::conv_pool_cuda_workspace_floats(shape(batch));
  }
  void forward(int batch, const float* x, float* y, float*) override {
    kernels::conv_pool_forward_cuda(shape(batch), x, params_, params_ + bias_offset(plan_), y,
                                    argmax_.data(), bf16_, stream_);
  }
  void backward(int batch, const float* x, const float*, const float* dy, float* dx,
                float* workspace) override {
    if (dx != nullptr) throw Error("conv: a fused max-pool is only planned for a first layer");
    kernels::conv_pool_backward_cuda(shape(batch), x, dy, argmax_.data(), grads_,
                                     grads_ + bias_offset(plan_), workspace, bf16_, stream_);
  }

 private:
  kernels::ConvPoolShape shape(int batch) const {
    return {conv2d_shape(plan_, batch), pool_.k, pool_.relu, false};
  }
  size_t pooled_values(int batch) const {
    const kernels::ConvPoolShape s = shape(batch);
    return static_cast<size_t>(batch) * s.out_h() * s.out_w() * s.conv.c_out;
  }

  FusedPool pool_;
  bool bf16_;
  Buffer<int8_t> argmax_;
};

}  // namespace

std::unique_ptr<Layer> make_conv_cuda(const LayerPlan& plan, const CudaLayerPlacement& where) {
  if (!plan.fused_next.empty())
    return std::make_unique<CudaConvPool>(plan, where.stream, where.precision == Precision::bf16);
  const FamilyChoice families = family_choice(where.knobs);
  if (where.precision == Precision::bf16)
    return std::make_unique<CudaConv2d<uint16_t>>(plan, where.stream, families, where.graphs,
                                                  where.bf16_params);
  return std::make_unique<CudaConv2d<float>>(plan, where.stream, families, where.graphs);
}

}  // namespace lockstep
