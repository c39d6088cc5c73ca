// run_within: a call that may block for ever (inside a library that waits on other processes), run
// on a helper thread that the caller waits for with a deadline instead of joining blindly. Used by
// the NCCL backend for ncclCommAbort, which can wait on the other ranks of a node (comm_nccl.cu).
// Thread-safe; no collective calls of its own (the call it runs may be one).
#pragma once

#include <chrono>
#include <functional>

namespace lockstep {

// Runs fn on a new thread and waits for it at most `limit`. True when fn returned in time (the
// thread is joined; what fn wrote is visible). False when it did not, or when no thread could be
// started: the thread is then left running, detached, so fn must own everything it touches (capture
// by value) and the caller should end the process soon (end_job_now, base/exit.h), since a call
// stuck in a library cannot be cancelled. Exceptions thrown by fn are swallowed.
bool run_within(std::chrono::milliseconds limit, std::function<void()> fn) noexcept;

}  // namespace lockstep
