// What the CUDA layer twins (*_cuda.cu) share: a base holding the stream their work goes to, and
// the bf16 copy of a dense or conv layer's weights that their bf16 GEMMs read. Included by the
// twins only. A layer and its copy are used by one thread at a time.
//
// The bf16 copy is cast from the fp32 weights at every forward: once per micro-batch rather than
// once per step, but a stale copy is impossible whoever changed the parameters (optimizer,
// checkpoint load, write_params), and the weights are small beside the activations. Parameters,
// gradients and activations between layers stay fp32 (master weights: the optimizer and the
// all-reduce see fp32 only). Storing activations in bf16 (relu and maxpool writing bf16) would save
// the cast pass of each dense input and halve activation traffic.
// No collective calls.
#pragma once

#include <cstdint>

#include "kernels/cast.h"
#include "kernels/cuda/stream.h"
#include "runtime/base/buffer.h"
#include "runtime/model/layers.h"

namespace lockstep {

class CudaLayer : public Layer {
 public:
  CudaLayer(const LayerPlan& plan, cudaStream_t stream) : Layer(plan), stream_(stream) {}

 protected:
  cudaStream_t stream_;
};

// The weights open the layer's parameters; the bias (kept in fp32) follows them.
class Bf16Weights {
 public:
  explicit Bf16Weights(const LayerPlan& plan)
      : words_(DeviceKind::cuda, static_cast<size_t>(bias_offset(plan))) {}
  const uint16_t* refresh(const float* params, cudaStream_t stream) {
    kernels::cast_f32_to_bf16_cuda(params, words_.data(), words_.size(), stream);
    return words_.data();
  }
  const uint16_t* get() const { return words_.data(); }

 private:
  Buffer<uint16_t> words_;
};

}  // namespace lockstep
