// Errors. Two kinds reach the user:
//  - Error: something failed on this rank (a library call, a timeout, a dead peer). The top-level
//    handler prints it with the rank prefix and aborts the whole job (MPI_Abort), because the other
//    ranks may be waiting in a collective.
//  - UsageError: a bad input or configuration. Two cases, told apart by type:
//    - AgreedUsageError: every rank knows it (agree_or_throw in agree.h made it so, and is the only
//      code that makes one). Rank 0 prints it once; every rank exits 2 without an abort.
//    - a plain UsageError: this rank alone may know it. The top-level handler prints it on the rank
//      that has it and ends the whole job (run_app in bootstrap.h), so no peer waits for it.
// Library calls go through one check macro per library (LS_CHECK_MPI here; CUDA, cuBLAS, NCCL and
// HDF5 have theirs beside their code), which report "[rank r/P host] <call> failed: <reason> at
// file:line" plus a hint.
// Thread-safe once set_rank_prefix() has run (at start-up, before other threads start). No
// collective calls: run_app (bootstrap.h) decides which errors end the job.
#pragma once

#include <stdexcept>
#include <string>

namespace lockstep {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A collective did not finish within its deadline.
class TimeoutError : public Error {
 public:
  using Error::Error;
};

// An input file that every rank reads failed while training ran (cut short, changed, unreadable):
// usually every rank sees it at once, so rank 0 reports it and aborts the job, and another rank
// reports it only when rank 0 has not ended the job within a short grace (run_app).
class SharedInputError : public Error {
 public:
  using Error::Error;
};

// Bad input or configuration, found by this rank (see above).
class UsageError : public Error {
 public:
  using Error::Error;
};

namespace detail {
// The protocol's one thrower (agree.cpp); declared here only to be the class's friend.
[[noreturn]] void throw_agreed(const std::string& message);
}  // namespace detail

// A UsageError that every rank of a communicator throws together with the same message, because
// they agreed on it (agree_or_throw); no other code can make one.
class AgreedUsageError : public UsageError {
 private:
  explicit AgreedUsageError(const std::string& message) : UsageError(message) {}
  friend void detail::throw_agreed(const std::string& message);
};

// "[rank r/P host]" for this process, filled in once the world is known ("[rank 0/1 ?]" before).
std::string rank_prefix();
void set_rank_prefix(int rank, int size, const std::string& host);

// Builds "<prefix> <call> failed: <reason> at file:line (hint: ...)" and throws Error.
[[noreturn]] void throw_call_error(const char* call, const std::string& reason, const char* file,
                                   int line, const char* hint = nullptr);

namespace detail {
[[noreturn]] void throw_mpi_error(const char* call, int code, const char* file, int line);
}  // namespace detail

}  // namespace lockstep

#define LS_CHECK_MPI(call)                                                        \
  do {                                                                            \
    int ls_mpi_rc_ = (call);                                                      \
    if (ls_mpi_rc_ != 0)                                                          \
      ::lockstep::detail::throw_mpi_error(#call, ls_mpi_rc_, __FILE__, __LINE__); \
  } while (0)
