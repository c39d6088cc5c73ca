#include "runtime/base/exit.h"

#include <mpi.h>
#include <unistd.h>

#include <cstdio>

#include "runtime/base/error.h"

namespace lockstep {

void end_job_now(const std::string& message, int code) noexcept {
  std::string text = message;
  if (text.rfind("[rank ", 0) != 0) text = rank_prefix() + " " + text;
  std::fprintf(stderr, "error: %s\n", text.c_str());
  std::fflush(stderr);
  std::fflush(stdout);
  int running = 0, finalized = 0, size = 1;
  MPI_Initialized(&running);
  MPI_Finalized(&finalized);
  if (running && !finalized) MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size > 1) MPI_Abort(MPI_COMM_WORLD, code);
  // A world of one can leave on its own; skip MPI_Finalize, a collective may still be pending.
  _exit(code);
}

}  // namespace lockstep
