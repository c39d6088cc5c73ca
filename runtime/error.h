// Errors. Two kinds reach the user:
//  - Error: something failed on this rank (a library call, a timeout, a dead peer). The top-level
//    handler prints it with the rank prefix and aborts the whole job (MPI_Abort), because the other
//    ranks may be waiting in a collective.
//  - UsageError: a bad input or configuration that every rank has agreed on (see agree_or_throw in
//    bootstrap.h). Rank 0 prints it once and every rank exits non-zero without an abort.
// Library calls go through one check macro per library (LS_CHECK_MPI here; CUDA, cuBLAS, NCCL and
// HDF5 have theirs beside their code), which report "[rank r/P host] <call> failed: <reason> at
// file:line" plus a hint.
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

// Bad input or configuration, known to every rank: printed once, no abort needed.
class UsageError : public Error {
 public:
  using Error::Error;
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

#define LS_CHECK_MPI(call)                                                         \
  do {                                                                             \
    int ls_mpi_rc_ = (call);                                                       \
    if (ls_mpi_rc_ != 0) ::lockstep::detail::throw_mpi_error(#call, ls_mpi_rc_, __FILE__, __LINE__); \
  } while (0)
