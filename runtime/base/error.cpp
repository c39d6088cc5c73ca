#include "runtime/base/error.h"

#include <mpi.h>

#include <sstream>

namespace lockstep {
namespace {
std::string g_prefix = "[rank 0/1 ?]";
}  // namespace

std::string rank_prefix() { return g_prefix; }

void set_rank_prefix(int rank, int size, const std::string& host) {
  g_prefix = "[rank " + std::to_string(rank) + "/" + std::to_string(size) + " " + host + "]";
}

void throw_call_error(const char* call, const std::string& reason, const char* file, int line,
                      const char* hint) {
  std::ostringstream os;
  os << rank_prefix() << " " << call << " failed: " << reason << " at " << file << ":" << line;
  if (hint != nullptr && *hint != '\0') os << " (hint: " << hint << ")";
  throw Error(os.str());
}

namespace detail {
void throw_mpi_error(const char* call, int code, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) len = 0;
  std::string reason = len > 0 ? std::string(text, len) : "MPI error " + std::to_string(code);
  throw_call_error(call, reason, file, line,
                   "a peer rank may have exited; check the other ranks' output");
}
}  // namespace detail

}  // namespace lockstep
