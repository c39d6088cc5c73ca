#include "runtime/train/checkpoint_dir.h"

#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "runtime/base/error.h"
#include "runtime/base/log.h"
#include "runtime/comm/agree.h"
#include "runtime/train/checkpoint.h"

namespace lockstep {
namespace {

// "ckpt-000000010.h5, ckpt-000000020.h5" (at most four names: the first two and the last two).
std::string names_text(const std::vector<std::string>& paths) {
  std::string s;
  for (size_t i = 0; i < paths.size(); ++i) {
    if (paths.size() > 4 && i == 2) {
      s += ", ... " + std::to_string(paths.size() - 4) + " more";
      i = paths.size() - 3;
      continue;
    }
    if (!s.empty()) s += ", ";
    s += std::filesystem::path(paths[i]).filename().string();
  }
  return s;
}

std::string check_on_rank0(const GuardOptions& o) {
  const std::string& dir = o.checkpoint_dir;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return "--checkpoint-dir " + dir + " cannot be created: " + ec.message();
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    return "--checkpoint-dir " + dir + " is not writable";
  const std::vector<std::string> found = list_checkpoints(dir);
  if (found.empty() || o.existing == ExistingCheckpoints::keep) return "";
  if (o.existing == ExistingCheckpoints::refuse)
    return "--checkpoint-dir " + dir + " already holds " + std::to_string(found.size()) +
           " checkpoint(s) of an earlier run (" + names_text(found) +
           "): continue that run with --resume " + dir +
           ", pass --overwrite-checkpoints to delete them and start afresh, or give another "
           "--checkpoint-dir";
  for (const std::string& f : found)
    if (!std::filesystem::remove(f, ec) || ec)
      return "--overwrite-checkpoints: cannot delete " + f + ": " + ec.message();
  LS_LOG(info) << "deleted " << found.size() << " checkpoint(s) of an earlier run from " << dir
               << " (--overwrite-checkpoints): " << names_text(found);
  return "";
}

}  // namespace

void prepare_checkpoint_dir(const GuardOptions& o, Communicator& comm) {
  std::string problem;
  if (comm.rank() == 0 && !o.checkpoint_dir.empty()) problem = check_on_rank0(o);
  // Rank 0's verdict, over the trainer's communicator (not necessarily MPI_COMM_WORLD).
  agree_or_throw(comm, problem.empty(), problem);
}

}  // namespace lockstep
