#include <atomic>
#include <sstream>

#include "runtime/base/cuda_check.h"
#include "runtime/base/deadline_call.h"
#include "runtime/base/error.h"
#include "runtime/base/exit.h"
#include "runtime/comm/nccl_bootstrap.h"
#include "runtime/comm/nccl_watchdog.h"

namespace lockstep::nccl {

namespace {
std::atomic<size_t> events_created{0};  // by every NcclState of the process
}  // namespace

std::string seconds(Millis t) {
  std::ostringstream os;
  os << std::chrono::duration<double>(t).count() << " s";
  return os.str();
}

NcclState::~NcclState() {
  for (cudaEvent_t e : spare_events_) cudaEventDestroy(e);
}

cudaEvent_t NcclState::take_event() {
  if (!spare_events_.empty()) {
    cudaEvent_t e = spare_events_.back();
    spare_events_.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  LS_CHECK_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  events_created.fetch_add(1, std::memory_order_relaxed);
  return e;
}

void NcclState::give_back(cudaEvent_t event) noexcept {
  if (event == nullptr) return;
  if (spare_events_.size() < kSpareEvents) {
    spare_events_.push_back(event);
    return;
  }
  cudaEventDestroy(event);
}

void NcclState::forget(const std::string& why) {
  comm = nullptr;
  alive = false;
  if (lost.empty()) lost = why;
}

void NcclState::abort(const std::string& why) noexcept {
  ncclComm_t victim = comm;
  forget(why);
  if (victim == nullptr) return;
  const int dev = device;
  // The helper thread owns copies of the handle and the device: it may outlive this state.
  if (run_within(kAbortGrace, [victim, dev] {
        cudaSetDevice(dev);
        ncclCommAbort(victim);
      }))
    return;
  end_job_now(rank_prefix() + " " + why + "; then ncclCommAbort did not return within " +
              seconds(kAbortGrace) +
              " (it can wait on the other ranks of this node), so this rank ends the job");
}

ncclResult_t NcclState::state() const {
  ncclResult_t async = ncclSuccess;
  const ncclResult_t rc = ncclCommGetAsyncError(comm, &async);
  return rc != ncclSuccess ? rc : async;
}

void NcclState::fail(const std::string& what, ncclResult_t rc) {
  std::string reason = ncclGetErrorString(rc);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') reason += std::string(" (") + last + ")";
  abort(what + " failed: " + reason);
  throw Error(rank_prefix() + " " + what + " failed: " + reason +
              "; the NCCL communicator was aborted (hint: " + detail::nccl_hint(rc) + ")");
}

void NcclState::check_async(const std::string& what) {
  if (!alive) return;
  const ncclResult_t now = state();
  if (now != ncclSuccess && now != ncclInProgress) fail(what, now);
}

void NcclState::settle(const std::string& what, Millis timeout) {
  if (comm == nullptr)
    throw Error(rank_prefix() + " " + what + ": the NCCL communicator was aborted (" + lost + ")");
  const auto start = Clock::now();
  Backoff backoff;
  for (;;) {
    const ncclResult_t now = state();
    if (now == ncclSuccess) return;
    if (now != ncclInProgress) fail(what, now);
    if (Clock::now() - start >= timeout) {
      abort(what + " did not complete within " + seconds(timeout));
      throw TimeoutError(rank_prefix() + " " + what + " did not complete within " +
                         seconds(timeout) + nccl_timeout_reason(what));
    }
    backoff.pause();
  }
}

void NcclWork::wait(Millis timeout) {
  const auto start = Clock::now();
  Backoff backoff;
  while (!poll()) {
    if (Clock::now() - start >= timeout) {
      const std::string why = what_ + " did not complete within " + seconds(timeout) +
                              ": a peer rank has died, stalled, or skipped this collective";
      state_->abort(why);
      throw TimeoutError(rank_prefix() + " " + why + "; the NCCL communicator was aborted");
    }
    backoff.pause();
  }
}

bool NcclWork::poll() {
  if (complete_) return true;
  const cudaError_t rc = cudaEventQuery(event_);
  if (rc == cudaSuccess) return complete_ = true;
  if (rc != cudaErrorNotReady) {
    cudaGetLastError();
    state_->abort(what_ + " failed on the GPU");
    throw_call_error(what_.c_str(),
                     std::string(cudaGetErrorName(rc)) + ": " + cudaGetErrorString(rc), __FILE__,
                     __LINE__, "the GPU failed while the collective ran");
  }
  if (!state_->alive)
    throw Error(rank_prefix() + " " + what_ + " cannot complete: the NCCL communicator was " +
                "aborted (" + state_->lost + ")");
  state_->check_async(what_);
  return false;
}

}  // namespace lockstep::nccl

namespace lockstep {
size_t nccl_completion_events_created() {
  return nccl::events_created.load(std::memory_order_relaxed);
}
}  // namespace lockstep
