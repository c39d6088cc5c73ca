// Exit codes and the emergency exit. Every app ends with one of these codes on every rank, so
// schedulers and scripts can act on them; end_job_now is for failures where unwinding could hang.
// Thread-safe: end_job_now may be called from any thread (a watchdog, a helper).
// No collective calls: end_job_now aborts the job without waiting for other ranks.
#pragma once

#include <string>

namespace lockstep {

// Exit codes of the apps, the same on every rank (schedulers and scripts act on them):
constexpr int kExitDone = 0;   // finished (training completed; --help)
constexpr int kExitError = 1;  // a runtime error; the job was aborted (MPI_Abort)
constexpr int kExitUsage = 2;  // a bad input or configuration (see run_app)
// EX_TEMPFAIL (sysexits.h): a stop signal (SIGTERM, SIGINT, SIGUSR1) ended lockstep-train before
// its configured epochs or steps, after the checkpoint was written: run again with --resume.
constexpr int kExitStoppedEarly = 75;

// Prints "error: <message>" (with this rank's prefix unless it has one) and ends the process at
// once with `code`: MPI_Abort, which takes every rank of the job down, where MPI is running with
// more than one rank; _exit otherwise. Runs no destructors, so it cannot wait on anything: for
// failures where unwinding could hang (a thread stuck inside NCCL).
[[noreturn]] void end_job_now(const std::string& message, int code = kExitError) noexcept;

}  // namespace lockstep
