#include "test_util.h"

#include <mpi.h>
#include <stdlib.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <mutex>
#include <stdexcept>
#include <utility>
#include <vector>

#include "runtime/base/error.h"

namespace lockstep::testing_util {

namespace {
// The folders this process made, removed when it exits normally (not by a child it forked, such as
// a death test's, whose exit would take its parent's files); LOCKSTEP_KEEP_TEST_DIRS=1 keeps them
// for a look after a failure. A test killed by a signal leaves its folder behind.
class MadeFolders {
 public:
  void add(const std::string& dir) {
    const std::lock_guard<std::mutex> lock(mutex_);
    made_.emplace_back(getpid(), dir);
  }
  ~MadeFolders() {
    const char* keep = getenv("LOCKSTEP_KEEP_TEST_DIRS");
    if (keep != nullptr && *keep != '\0' && std::string(keep) != "0") return;
    for (const auto& [pid, dir] : made_) {
      std::error_code ec;
      if (pid == getpid()) std::filesystem::remove_all(dir, ec);
    }
  }

 private:
  std::mutex mutex_;
  std::vector<std::pair<pid_t, std::string>> made_;
};
MadeFolders made_folders;
}  // namespace

std::string local_temp_dir(const std::string& tag) {
  const char* base = getenv("TMPDIR");
  std::string templ = std::string(base && *base ? base : "/tmp") + "/lockstep-" + tag + "-XXXXXX";
  if (mkdtemp(templ.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + templ);
  made_folders.add(templ);
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
