// GraphRunner: full training steps run as CUDA graphs (DESIGN.md decision 18), for the Trainer.
// It owns what replaying adds to a step: the warm-up (the first full steps run eagerly: the
// convolutions time their kernel families then, and a graph must record the settled step), one
// capture per input slot, the agreed fallback when a capture fails on any rank, the launch, and
// the watched wait for the replay. What the step does is the Trainer's: its step work in recording
// mode (step.h, StepMode), handed in as `record`. No CUDA header: the stream is the step's.
// Used by the training thread; run() is collective where it captures.
#pragma once

#include <functional>
#include <string>

#include "kernels/cuda/stream.h"
#include "runtime/base/communicator.h"
#include "runtime/comm/buckets.h"
#include "runtime/observe/step_timer.h"
#include "runtime/train/step.h"

namespace lockstep {

class GraphRunner {
 public:
  // Full steps run eagerly before the first capture.
  static constexpr int64_t kWarmSteps = 2;

  // graphs and stream: the step's (Step::graphs(), its placement's stream); host: agrees on a
  // failed capture; grads: watches each replay (its watch_stream: NCCL's watchdog), where it is
  // capturable (else the stream is synchronised); reducer: drained when a capture throws; timer:
  // the step's phases; capture_fail_rank: a test hook (test_hooks.h).
  GraphRunner(StepGraphs& graphs, cudaStream_t stream, Communicator& host, Communicator& grads,
              BucketReducer& reducer, StepTimer& timer, int capture_fail_rank);
  ~GraphRunner() = default;
  // For a trainer unwinding with a replay perhaps in flight (its destructor calls this before any
  // of its buffers goes: freeing device memory waits for the device): waits for the stream as for
  // a collective (the deadline, then the communicator's abort ends its collectives), so that
  // nothing waits for ever on peers that never launch theirs. Does nothing when not unwinding.
  // Never throws.
  void settle_if_unwinding() noexcept;
  // The error the step failed with, for the message of a wait that gives up while unwinding (the
  // rank may end the job from inside that wait, before its handler prints the error).
  void note_failure(std::string what) { failure_ = std::move(what); }
  GraphRunner(const GraphRunner&) = delete;
  GraphRunner& operator=(const GraphRunner&) = delete;

  // Whether this step runs as a graph: a full batch, the warm-up done, graphs not given up. The
  // same answer on every rank.
  bool ready(bool full) const;
  // An eager step ran instead; a full one counts towards the warm-up.
  void ran_eagerly(bool full);
  StepGraphs& graphs() { return graphs_; }

  // The step of the input slot `key` (the device buffer its batch `b` was uploaded to): captured
  // at its first use - `record` queues the step's work into the capture - then launched;
  // `while_running` is the host's work during the replay (the next batch's staging); then the
  // watched wait. Collective over host at a capture: false on every rank when a capture failed on
  // any (nothing ran; the graphs are given up and the step must run eagerly). A timeout, or a
  // gradient communicator that failed, is no capture problem: it propagates.
  bool run(const void* key, const Batch& b, const std::function<void()>& record,
           const std::function<void()>& while_running);

 private:
  StepGraphs& graphs_;
  cudaStream_t stream_;
  Communicator& host_;
  Communicator& grads_;
  BucketReducer& reducer_;
  StepTimer& timer_;
  int capture_fail_rank_;
  int64_t warm_steps_ = 0;
  bool given_up_ = false;
  std::string failure_;
};

}  // namespace lockstep
