#include "runtime/train/checkpoint_dir.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
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

// "pid 4242 on host node7 since 2026-11-30 07:40:12 UTC": who holds the lock, for its file.
std::string holder_text() {
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) std::strcpy(host, "?");
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  char when[32] = {};
  gmtime_r(&now, &utc);
  std::strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", &utc);
  return "pid " + std::to_string(::getpid()) + " on host " + host + " since " + when;
}

// Takes the folder's lock into `lock`; a refusal when another process holds it. Where the file
// system takes no locks, logs so and leaves `lock` empty.
std::string lock_dir(const std::string& dir, CheckpointDirLock& lock) {
  const std::string path = dir + "/.lockstep.lock";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return "--checkpoint-dir " + dir + ": cannot open " + path + ": " + strerror(errno);
  struct flock whole {};
  whole.l_type = F_WRLCK;
  whole.l_whence = SEEK_SET;  // from the start, length 0: the whole file
  if (::fcntl(fd, F_SETLK, &whole) != 0) {
    const int code = errno;
    if (code == EACCES || code == EAGAIN) {
      char text[256] = {};
      const ssize_t n = ::pread(fd, text, sizeof(text) - 1, 0);
      ::close(fd);
      std::string who = n > 0 ? std::string(text, static_cast<size_t>(n)) : "";
      while (!who.empty() && (who.back() == '\n' || who.back() == '\0')) who.pop_back();
      return "--checkpoint-dir " + dir + " is in use by another run" +
             (who.empty() ? std::string() : " (" + who + ")") +
             ": two runs writing one folder would overwrite and prune each other's checkpoints; "
             "give this run another --checkpoint-dir, or wait until that run ends (" +
             path + " is locked while it lasts)";
    }
    ::close(fd);
    LS_LOG(warn) << "--checkpoint-dir " << dir << ": its file system does not lock files ("
                 << strerror(code) << "): a second run given the same folder would not be refused";
    return "";
  }
  const std::string who = holder_text() + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, who.data(), who.size(), 0) < 0) {
    LS_LOG(debug) << "cannot write the holder into " << path << ": " << strerror(errno);
  }
  lock = CheckpointDirLock(fd);
  return "";
}

std::string check_on_rank0(const GuardOptions& o, CheckpointDirLock& lock) {
  const std::string& dir = o.checkpoint_dir;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return "--checkpoint-dir " + dir + " cannot be created: " + ec.message();
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    return "--checkpoint-dir " + dir + " is not writable";
  if (std::string problem = lock_dir(dir, lock); !problem.empty()) return problem;
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

CheckpointDirLock& CheckpointDirLock::operator=(CheckpointDirLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

CheckpointDirLock::~CheckpointDirLock() {
  if (fd_ >= 0) ::close(fd_);  // closing it releases the lock
}

CheckpointDirLock prepare_checkpoint_dir(const GuardOptions& o, Communicator& comm) {
  std::string problem;
  CheckpointDirLock lock;
  if (comm.rank() == 0 && !o.checkpoint_dir.empty()) problem = check_on_rank0(o, lock);
  // Rank 0's verdict, over the trainer's communicator (not necessarily MPI_COMM_WORLD).
  agree_or_throw(comm, problem.empty(), problem);
  return lock;
}

}  // namespace lockstep
