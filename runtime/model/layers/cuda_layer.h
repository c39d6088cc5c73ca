// What the CUDA layer twins (*_cuda.cu) share: a base holding the stream their work goes to, and
// the bf16 copy of a layer's weights that their bf16 GEMMs read. Included by the
// twins only. A layer and its copy are used by one thread at a time.
//
// The bf16 copy is the model's where it keeps one (ModelPlacement::bf16_params, a trainer's bf16
// run without ZeRO: written by the optimizer's update in the same pass as the parameters, and by
// write_params) and the layer's words in it lie on 256 bytes (Bf16Params::aligned), else cast from
// the fp32 weights at every forward: once per micro-batch rather than once per step, but never
// stale whoever changed the parameters. Parameters, gradients and activations between layers stay
// fp32 (master weights: the optimizer and the all-reduce see fp32 only). Storing activations in
// bf16 (relu and maxpool writing bf16) would save the cast pass of each dense input and halve
// activation traffic.
// No collective calls.
#pragma once

#include <cstdint>

#include "kernels/cast.h"
#include "kernels/cuda/stream.h"
#include "runtime/base/buffer.h"
#include "runtime/model/layer_registry.h"
#include "runtime/model/layers.h"

namespace lockstep {

class CudaLayer : public Layer {
 public:
  CudaLayer(const LayerPlan& plan, cudaStream_t stream) : Layer(plan), stream_(stream) {}

 protected:
  cudaStream_t stream_;
};

// The bf16 words of `count` parameters (a dense or conv layer's weights, which open its
// parameters; a GPT block's weight or bias), read by the layer's bf16 products.
class Bf16Weights {
 public:
  Bf16Weights() = default;
  // shared: the model's copy (CudaLayerPlacement::bf16_params), or null for a copy of its own.
  Bf16Weights(size_t count, const Bf16Params* shared)
      : shared_(shared), count_(count), words_(DeviceKind::cuda, shared ? 0 : count) {}
  // A layer's weights: its parameters before the bias (kept in fp32).
  Bf16Weights(const LayerPlan& plan, const Bf16Params* shared)
      : Bf16Weights(static_cast<size_t>(bias_offset(plan)), shared) {}
  // The weights' words for this forward pass: the model's copy where it lies as aligned as a copy
  // of the layer's own, else cast now (into a copy allocated at the first such forward, which must
  // not be under a capture: a new buffer is zeroed on the legacy stream. The trainer's first steps
  // run uncaptured, and where the words lie does not change).
  const uint16_t* refresh(const float* params, cudaStream_t stream) {
    if (shared_ != nullptr && (now_ = shared_->aligned(params)) != nullptr) return now_;
    if (words_.empty()) words_ = Buffer<uint16_t>(DeviceKind::cuda, count_);
    kernels::cast_f32_to_bf16_cuda(params, words_.data(), count_, stream);
    return now_ = words_.data();
  }
  // Those of the last refresh().
  const uint16_t* get() const { return now_; }

 private:
  const Bf16Params* shared_ = nullptr;
  size_t count_ = 0;
  Buffer<uint16_t> words_;
  const uint16_t* now_ = nullptr;
};

}  // namespace lockstep
