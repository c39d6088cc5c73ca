#include "test_util.h"

#include <mpi.h>
#include <stdlib.h>

#include <cstring>
#include <stdexcept>

#include "runtime/base/error.h"

namespace lockstep::testing_util {

std::string local_temp_dir(const std::string& tag) {
  const char* base = getenv("TMPDIR");
  std::string templ = std::string(base && *base ? base : "/tmp") + "/lockstep-" + tag + "-XXXXXX";
  if (mkdtemp(templ.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + templ);
  return templ;
}

std::string shared_temp_dir(const std::string& tag) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  char buf[4096] = {};
  if (rank == 0) {
    std::string dir = local_temp_dir(tag);
    std::strncpy(buf, dir.c_str(), sizeof(buf) - 1);
  }
  MPI_Bcast(buf, sizeof(buf), MPI_CHAR, 0, MPI_COMM_WORLD);
  return buf;
}

std::string usage_message(const std::function<void()>& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

}  // namespace lockstep::testing_util
