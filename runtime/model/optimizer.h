// Optimizer: applies one update to a model's flat parameter buffer from its (all-reduced) flat
// gradient buffer, through the kernels' update functions. It owns the state buffers (momentum
// velocity; Adam's first and second moments), each as long as the parameter buffer and in the same
// layout, and the count of updates done. Every rank holds the same state and applies the same
// update, so replicas stay identical. Checkpoints read and write the state through state() and
// set_steps(). The state lives where the model computes: with DeviceKind::cuda it is device
// memory, the update runs through the kernels' CUDA twins on the given stream, and state() gives
// buffers that host code reads and writes only through their copies (buffer.h). Used by one thread.
// No collective calls: it updates from a gradient that is already reduced.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cuda_stream.h"
#include "runtime/base/buffer.h"

namespace lockstep {

enum class OptimizerKind { sgd, momentum, adam, adamw };
const char* optimizer_name(OptimizerKind k);
OptimizerKind parse_optimizer(const std::string& text);  // throws UsageError naming --optimizer

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::adam;
  float momentum = 0.9f;      // momentum
  bool nesterov = false;      // momentum
  float beta1 = 0.9f;         // adam, adamw
  float beta2 = 0.999f;       // adam, adamw
  float eps = 1e-8f;          // adam, adamw
  float weight_decay = 0.0f;  // L2 added to the gradient (sgd, momentum, adam); decoupled (adamw)
};

// Throws UsageError naming the option when a hyperparameter is out of range.
void validate(const OptimizerConfig& c);

struct StateBuffer {
  std::string name;  // "velocity", "adam_m", "adam_v"
  Buffer<float>* data;
};

class Optimizer {
 public:
  Optimizer(const OptimizerConfig& config, size_t param_count, DeviceKind device = DeviceKind::cpu,
            cudaStream_t stream = nullptr);

  // One update with learning rate lr; counts it. params and grads are in the optimizer's memory.
  void step(float* params, const float* grads, float lr);

  const OptimizerConfig& config() const { return config_; }
  int64_t steps() const { return steps_; }
  void set_steps(int64_t steps) { steps_ = steps; }
  std::vector<StateBuffer> state();

 private:
  OptimizerConfig config_;
  size_t n_ = 0;
  DeviceKind device_;
  cudaStream_t stream_;
  int64_t steps_ = 0;
  Buffer<float> a_, b_;  // velocity (momentum) or m and v (adam, adamw)
};

}  // namespace lockstep
