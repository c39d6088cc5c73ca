// Optimizer: applies one update to a model's flat parameter buffer from its (all-reduced) flat
// gradient buffer, through the kernels' update functions. It owns the state buffers (momentum
// velocity; Adam's first and second moments), each as long as the parameter buffer and in the same
// layout, and the count of updates done. Every rank holds the same state and applies the same
// update, so replicas stay identical. Checkpoints read and write the state through state() and
// set_steps(). The state lives where the model computes: with DeviceKind::cuda it is device
// memory, the update runs through the kernels' CUDA twins on the given stream, and state() gives
// buffers that host code reads and writes only through their copies (buffer.h). Used by one thread.
// No collective calls: it updates from a gradient that is already reduced.
//
// Weight decay: sgd, momentum and adam add L2 (weight_decay * p) to the gradient of every
// parameter, as torch.optim's SGD and Adam do. adamw decays (p -= lr * weight_decay * p) only the
// ranges given to set_decay_ranges, as GPT training does (matrices and embeddings; biases and
// layer-norm gains undecayed); without ranges it decays every parameter.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/stream.h"
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
  float weight_decay = 0.0f;  // L2 added to every gradient (sgd, momentum, adam); decoupled
                              // (adamw), on the decay ranges only
};

// (offset, count) ranges of a flat parameter buffer.
using ParamRanges = std::vector<std::pair<size_t, size_t>>;

struct ParamTensorInfo;  // model.h
// The ranges of the tensors of rank >= 2 (dense and conv weights, embeddings): those GPT-style
// training decays, leaving biases, norm gains and shifts (rank 1) undecayed.
ParamRanges matrix_ranges(const std::vector<ParamTensorInfo>& tensors);

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
  ~Optimizer();
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // The parameters adamw decays, as (offset, count) pairs within the buffer; the rest get weight
  // decay 0. Any order; overlaps and adjacent ranges merge. Throws std::invalid_argument when a
  // range ends past the buffer. Ignored by sgd, momentum and adam (their L2 covers everything).
  // Offsets are the state's (see set_segments).
  void set_decay_ranges(const ParamRanges& ranges);

  // A sharded optimizer (ZeRO, DESIGN.md decision 19): its state [state, state + count) of each
  // segment belongs to the parameters [flat, flat + count) of the buffers step() is given; the
  // segments cover the state once, in order. Without segments the state and the buffers share
  // offsets. Throws std::invalid_argument when the segments do not cover [0, param_count).
  // compact_grads: step()'s gradients are laid out as the state, not as the parameters (ZeRO
  // stage 2: this rank's blocks of the reduced gradient alone). compact_params: likewise step()'s
  // parameters (ZeRO's fp32 master weights of this rank's blocks, under a bf16 all-gather).
  struct Segment {
    size_t flat, state, count;
  };
  void set_segments(std::vector<Segment> segments, bool compact_grads = false,
                    bool compact_params = false);

  // A bf16 run's one weight copy (Model::params16, device optimizers only): every update, captured
  // or not, writes the bf16 words of the parameters it updates at the same offsets of `words`, in
  // the same pass, so the copy stays the cast of the parameters. Null: no copy. Throws
  // std::logic_error on the host or with segments (ZeRO: the other ranks' blocks arrive by
  // all-gather, and the masters may not be the model's parameters).
  void set_params16(uint16_t* words);

  // One update with learning rate lr; counts it once, whatever the number of ranges. params and
  // grads are in the optimizer's memory.
  void step(float* params, const float* grads, float lr);

  // The update captured in a CUDA graph (device optimizers only; DESIGN.md decision 18): enqueues
  // the copy of the step's coefficients from page-locked host memory into device memory, then the
  // update through gated_update_cuda (kernels/step/optimizer.h), skipped on the device when one of
  // gate[0, gates) (device memory) is not finite. It does not count the update: count_update()
  // does, once the host knows it was applied. Before each replay of the graph,
  // set_captured_lr() writes the coefficients of the next update (steps() + 1) at rate lr; the
  // caller must know the previous replay has finished with them (it has waited for the step).
  void step_captured(float* params, const float* grads, const double* gate, int gates);
  void set_captured_lr(float lr);
  void count_update() { ++steps_; }

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
  // The buffer cut into consecutive pieces covering [0, n), each decayed or not (adamw).
  struct Piece {
    size_t begin, end;
    bool decay;
  };
  std::vector<Piece> pieces_;
  // The pieces one update runs over: the whole buffer, or pieces_ for a decaying adamw.
  const std::vector<Piece>& update_pieces() const;
  std::vector<Piece> whole_;
  // An update's kernel calls: each piece within each segment, at its buffers' offset (flat) and
  // its state's (state); rebuilt when the pieces or the segments change.
  struct Run {
    size_t flat, state, count;
    bool decay;
  };
  std::vector<Segment> segments_;
  bool compact_grads_ = false;
  bool compact_params_ = false;
  bool sharded_ = false;          // set_segments was called
  uint16_t* params16_ = nullptr;  // set_params16
  std::vector<Run> runs_;
  void build_runs();
  Buffer<float> a_, b_;  // velocity (momentum) or m and v (adam, adamw)
  // Captured updates: one coefficient set per update piece, in page-locked host memory (written
  // before each replay) and on the device (the graph's copy of it).
  void* captured_host_ = nullptr;
  Buffer<unsigned char> captured_device_;
};

}  // namespace lockstep
