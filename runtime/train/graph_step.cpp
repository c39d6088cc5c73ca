#include "runtime/train/graph_step.h"

#include <exception>
#include <optional>
#include <string>

#include "kernels/cuda/memory.h"
#include "runtime/base/error.h"
#include "runtime/base/log.h"
#include "runtime/comm/agree.h"

namespace lockstep {

GraphRunner::GraphRunner(StepGraphs& graphs, cudaStream_t stream, Communicator& host,
                         Communicator& grads, BucketReducer& reducer, StepTimer& timer,
                         int capture_fail_rank)
    : graphs_(graphs),
      stream_(stream),
      host_(host),
      grads_(grads),
      reducer_(reducer),
      timer_(timer),
      capture_fail_rank_(capture_fail_rank) {}

void GraphRunner::settle_if_unwinding() noexcept {
  if (std::uncaught_exceptions() == 0 || !grads_.capturable()) return;
  try {
    const std::string what = "the training step in flight when this rank failed" +
                             (failure_.empty() ? std::string() : " (" + failure_ + ")");
    grads_.watch_stream(stream_, what)->wait(grads_.timeout());
  } catch (const std::exception&) {
    // Reported by the error that unwinds; the communicator is aborted.
  }
}

bool GraphRunner::ready(bool full) const { return full && !given_up_ && warm_steps_ >= kWarmSteps; }

void GraphRunner::ran_eagerly(bool full) {
  if (full) warm_steps_ += 1;
}

bool GraphRunner::run(const void* key, const Batch& b, const std::function<void()>& record,
                      const std::function<void()>& while_running) {
  if (!graphs_.ready(key)) {
    std::string why;
    graphs_.begin();
    timer_.begin_capture(key);
    try {
      if (capture_fail_rank_ == host_.rank())
        throw Error("test hook LOCKSTEP_TEST_CAPTURE_FAIL_RANK: the capture fails on this rank");
      record();
      why = graphs_.end(key);
    } catch (const std::exception& e) {
      graphs_.abort();
      reducer_.drain();
      // A peer that never came, or a communicator that failed, is no capture problem: going on
      // without graphs would only fail later on a dead communicator, with a misleading message.
      if (dynamic_cast<const TimeoutError*>(&e) != nullptr || !grads_.lost().empty()) throw;
      why = e.what();
    }
    // Every rank captures, or none does: a rank that runs the step uncaptured issues its
    // collectives from the host, so the others must too.
    const std::optional<FirstProblem> problem = first_problem(host_, why.empty(), why);
    timer_.end_capture(!problem.has_value());
    if (problem) {
      graphs_.clear();
      timer_.forget_captures();
      given_up_ = true;
      if (host_.rank() == 0) {
        LS_LOG(warn) << "capturing the training step in a CUDA graph failed on rank "
                     << problem->rank << " (" << problem->message
                     << "); the run goes on without graphs";
      }
      return false;
    }
  } else {
    timer_.replayed(key);
  }
  graphs_.launch(key, b);
  while_running();
  // The host waits for the step, watched as its collectives would be (a dead peer aborts NCCL).
  if (grads_.capturable())
    grads_.watch_stream(stream_, "the captured training step")->wait(grads_.timeout());
  else
    kernels::cuda_stream_synchronize(stream_);
  timer_.collect(/*synced=*/true);
  return true;
}

}  // namespace lockstep
