// The NCCL backend's watchdog (comm_nccl.cu): the communicator's state shared with its Work
// handles, the handle that polls a collective under a deadline, and an abort that cannot hang.
// CUDA build only. Used by the one thread that issues the collectives.
//
// A wait polls the collective's completion event and ncclCommGetAsyncError. Past the deadline, or
// on an asynchronous error, it aborts the communicator and throws, naming the collective and the
// rank; an aborted communicator refuses every later call.
//
// Aborting without hanging: since NCCL 2.16 ncclCommAbort can block on the other ranks of the node
// (NCCL issues 863, 992 and 1777), which would turn a stalled peer's fast failure into a hang.
// Every abort therefore runs on a helper thread that gets kAbortGrace (run_within,
// deadline_call.h). Normally it returns well within that, and the caller throws as before, for the
// top-level handler to report and end the job. If it does not, this rank prints why and ends the
// job itself at once (end_job_now, base/exit.h: MPI_Abort): what the handler would have done with
// the exception, minus the hang. Nothing can cancel a call stuck inside NCCL, and unwinding past
// it could block again in a destructor.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "runtime/base/communicator.h"

namespace lockstep::nccl {

using Clock = std::chrono::steady_clock;

// How long an abort may take before this rank ends the job instead. An abort that does return
// frees device memory, which waits for the kernels already queued: this leaves room for those of a
// healthy step. With a peer stopped (SIGSTOP) in a step, 2 NCCL ranks over sockets on an H200,
// NCCL 2.28.9, the abort did not return at all: the job then ends --timeout + kAbortGrace after the
// stall (nccl_hosts_gpu_test.sh).
constexpr Millis kAbortGrace{5'000};

// "1.5 s", for messages.
std::string seconds(Millis t);

// Polling pace: yield for the first 2 ms (most collectives finish by then, and their measured
// time stays exact), then sleep 1/50 of the time waited so far, capped at 1 ms: a long wait costs
// little CPU, overshoots its completion by at most 2%, and checks the deadline every millisecond.
class Backoff {
 public:
  void pause() {
    auto waited = Clock::now() - start_;
    if (waited < std::chrono::milliseconds(2)) {
      std::this_thread::yield();
      return;
    }
    std::this_thread::sleep_for(
        std::min<Clock::duration>(waited / 50, std::chrono::milliseconds(1)));
  }

 private:
  Clock::time_point start_ = Clock::now();
};

// The NCCL communicator, shared by NcclCommunicator and its Work handles: a handle may be waited
// on after the communicator failed, and must then say so instead of touching a freed comm.
struct NcclState {
  int device = 0;
  ncclComm_t comm = nullptr;  // while NCCL holds it: from its creation to abort or destroy
  bool alive = false;         // initialised, neither aborted nor destroyed
  std::string lost;           // why it is not alive any more

  NcclState() = default;
  NcclState(const NcclState&) = delete;
  NcclState& operator=(const NcclState&) = delete;
  ~NcclState();

  // Completion events for the handles: one from the spares, else a new one; a handle gives its
  // event back when it is destroyed (re-recording an event replaces what it waits for, so one
  // still pending may be reused). At most kSpareEvents are kept.
  cudaEvent_t take_event();
  void give_back(cudaEvent_t event) noexcept;
  static constexpr size_t kSpareEvents = 64;

  // Marks the communicator gone; the caller has freed it, or abort() is about to.
  void forget(const std::string& why);

  // Frees the communicator and stops its kernels, on a helper thread given kAbortGrace to return;
  // past that, ends the job (see above). Nothing useful to check.
  void abort(const std::string& why) noexcept;

  // The communicator's state: ncclSuccess, ncclInProgress, or the error it met.
  ncclResult_t state() const;

  // Aborts, then throws Error for `what` having failed with rc.
  [[noreturn]] void fail(const std::string& what, ncclResult_t rc);

  // Throws Error when NCCL reports an asynchronous failure (a peer died, a network error), after
  // aborting the communicator so that nothing else waits on it.
  void check_async(const std::string& what);

  // Returns once the last call made on the communicator has taken effect (a non-blocking
  // communicator's state has left ncclInProgress). Past `timeout`, or on an error, aborts and
  // throws TimeoutError or Error naming `what`.
  void settle(const std::string& what, Millis timeout);

 private:
  std::vector<cudaEvent_t> spare_events_;
};

// The handle of one collective: done once its completion event (recorded on the communicator's
// stream after it) has passed.
class NcclWork : public Work {
 public:
  NcclWork(std::shared_ptr<NcclState> state, cudaEvent_t event, std::string what)
      : state_(std::move(state)), event_(event), what_(std::move(what)) {}
  ~NcclWork() override { state_->give_back(event_); }
  NcclWork(const NcclWork&) = delete;
  NcclWork& operator=(const NcclWork&) = delete;

  bool done() override { return poll(); }
  cudaEvent_t event() const { return event_; }  // recorded after the collective
  void wait(Millis timeout) override;

 private:
  // True once the collective has completed; throws if it cannot any more.
  bool poll();

  std::shared_ptr<NcclState> state_;
  cudaEvent_t event_;
  std::string what_;
  bool complete_ = false;
};

}  // namespace lockstep::nccl
