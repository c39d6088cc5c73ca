#include "runtime/train/checkpoint.h"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>
#include <sstream>

#include "runtime/base/error.h"
#include "runtime/train/checkpoint_io.h"

namespace fs = std::filesystem;

namespace lockstep {
namespace {

constexpr const char* kPrefix = "ckpt-";
constexpr const char* kSuffix = ".h5";
constexpr const char* kTmpPrefix = ".ckpt-";
constexpr const char* kTmpSuffix = ".h5.tmp";

// The global step in "ckpt-<digits>.h5", or -1 when `name` is not a checkpoint's name.
int64_t step_of(const std::string& name) {
  const size_t p = std::strlen(kPrefix), s = std::strlen(kSuffix);
  if (name.size() <= p + s || name.compare(0, p, kPrefix) != 0 ||
      name.compare(name.size() - s, s, kSuffix) != 0)
    return -1;
  std::string digits = name.substr(p, name.size() - p - s);
  if (digits.empty() || digits.size() > 18 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return -1;
  return std::stoll(digits);
}

bool is_temp_name(const std::string& name) {
  const size_t p = std::strlen(kTmpPrefix), s = std::strlen(kTmpSuffix);
  return name.size() > p + s && name.compare(0, p, kTmpPrefix) == 0 &&
         name.compare(name.size() - s, s, kTmpSuffix) == 0;
}

[[noreturn]] void throw_errno(const std::string& what, const std::string& path) {
  throw Error(rank_prefix() + " " + what + " " + path + " failed: " + std::strerror(errno));
}

// fsync of a file or a folder (a folder's entry for a renamed file is durable only after this).
void sync_path(const std::string& path, bool directory) {
  int fd = ::open(path.c_str(), directory ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  if (fd < 0) throw_errno("open for fsync of", path);
  int rc = ::fsync(fd);
  int saved = errno;
  ::close(fd);
  errno = saved;
  if (rc != 0) throw_errno("fsync of", path);
}

// The message for a save that failed with `what`: a full disk in words (HDF5 reports it deep in
// its error stack), and which checkpoint a user still has.
std::string save_failure(const std::string& what, const std::string& dir, const std::string& path) {
  const std::vector<std::string> kept = list_checkpoints(dir);
  const std::string newest = kept.empty() ? "none" : kept.back();
  struct statvfs fsinfo {};
  const bool full = what.find(std::strerror(ENOSPC)) != std::string::npos ||
                    (::statvfs(dir.c_str(), &fsinfo) == 0 && fsinfo.f_bavail == 0);
  if (full)
    return rank_prefix() + " no space left on device writing " + path +
           "; newest good checkpoint " + newest;
  return what + "; writing checkpoint " + path + " failed, newest good checkpoint " + newest;
}

// The LOCKSTEP_TEST_*_IN_SAVE hooks (checkpoint.h): raise `sig` in this process at `step`.
void test_hook(const char* env, int64_t step, int sig, const std::string& temp_path) {
  const char* at = std::getenv(env);
  if (at == nullptr || std::to_string(step) != at) return;
  std::fprintf(stderr, "%s test hook %s: %s after writing %s\n", rank_prefix().c_str(), env,
               sig == SIGKILL ? "dying" : "stopping", temp_path.c_str());
  std::fflush(stderr);
  std::raise(sig);
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::ostringstream os;
  os << "(";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ")";
  return os.str();
}

// A programming error in the caller, not a user's input: Error.
void check_tensors(const std::vector<NamedTensor>& tensors, const char* kind) {
  std::set<std::string> seen;
  for (const NamedTensor& t : tensors) {
    if (t.name.empty() || t.name.front() == '/' || t.name.find('\n') != std::string::npos ||
        t.name.find("//") != std::string::npos || !seen.insert(t.name).second)
      throw Error("checkpoint: " + std::string(kind) + " name '" + t.name +
                  "' is empty, repeated, or contains a newline or a leading or double '/'");
    uint64_t count = 1;
    for (int64_t d : t.shape) {
      if (d < 0)
        throw Error("checkpoint: " + std::string(kind) + " " + t.name +
                    " has a negative dimension");
      count *= static_cast<uint64_t>(d);
    }
    if (count != t.data.size())
      throw Error("checkpoint: " + std::string(kind) + " " + t.name + " has shape " +
                  shape_text(t.shape) + " but " + std::to_string(t.data.size()) + " values");
    for (size_t i = 0; i < t.data.size(); ++i)
      if (!std::isfinite(t.data[i]))
        throw Error("checkpoint not written: " + std::string(kind) + " " + t.name +
                    " holds a non-finite value at index " + std::to_string(i) +
                    " (the last good checkpoint is kept)");
  }
}

void compare_tensors(const std::vector<NamedTensor>& have, const std::vector<NamedTensor>& want,
                     const char* kind, const std::string& path) {
  auto refuse = [&](const std::string& what) {
    throw UsageError("checkpoint " + path + " does not fit this model: " + what);
  };
  for (const NamedTensor& w : want) {
    const NamedTensor* h = find_tensor(have, w.name);
    if (h == nullptr) refuse(std::string(kind) + " " + w.name + " is missing from the checkpoint");
    if (h->shape != w.shape)
      refuse(std::string(kind) + " " + w.name + " has shape " + shape_text(h->shape) +
             " in the checkpoint, the model needs " + shape_text(w.shape));
  }
  for (const NamedTensor& h : have)
    if (find_tensor(want, h.name) == nullptr)
      refuse("the checkpoint has " + std::string(kind) + " " + h.name + ", which the model lacks");
}

}  // namespace

std::string checkpoint_file_name(const std::string& dir, int64_t global_step) {
  char name[64];
  std::snprintf(name, sizeof(name), "%s%09lld%s", kPrefix, static_cast<long long>(global_step),
                kSuffix);
  return (fs::path(dir) / name).string();
}

std::map<std::string, std::string> config_record_values(const std::string& config) {
  std::map<std::string, std::string> saved;
  std::istringstream lines(config);
  for (std::string line; std::getline(lines, line);)
    if (const size_t eq = line.find('='); eq != std::string::npos)
      saved[line.substr(0, eq)] = line.substr(eq + 1);
  return saved;
}

const NamedTensor* find_tensor(const std::vector<NamedTensor>& tensors, const std::string& name) {
  for (const NamedTensor& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

std::vector<std::string> list_checkpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    int64_t step = step_of(entry.path().filename().string());
    if (step >= 0 && entry.is_regular_file(ec)) found.emplace_back(step, entry.path().string());
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

std::string resolve_checkpoint(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    std::vector<std::string> all = list_checkpoints(path);
    if (all.empty())
      throw UsageError("no checkpoint in folder " + path +
                       " (looked for files named ckpt-<step>.h5)");
    return all.back();
  }
  if (!fs::exists(path, ec)) throw UsageError("checkpoint " + path + " does not exist");
  return path;
}

std::string save_checkpoint(const std::string& dir, const CheckpointState& state, int keep) {
  check_tensors(state.params, "parameter");
  check_tensors(state.optimizer, "optimizer buffer");
  for (const auto& [name, value] : state.scalars)
    if (name.empty() || !std::isfinite(value))
      throw Error("checkpoint not written: scalar '" + name + "' is unnamed or not finite");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    throw Error(rank_prefix() + " cannot create checkpoint folder " + dir + ": " + ec.message());

  const std::string final_path = checkpoint_file_name(dir, state.global_step);
  const std::string temp_path =
      (fs::path(dir) / (std::string(".") + fs::path(final_path).filename().string() + ".tmp"))
          .string();
  try {
    detail::write_checkpoint_h5(temp_path, state);
    sync_path(temp_path, false);
  } catch (const Error& e) {
    fs::remove(temp_path, ec);  // a partial file must not take the space a retry needs
    throw Error(save_failure(e.what(), dir, final_path));
  }
  test_hook(kCrashInSaveEnv, state.global_step, SIGKILL, temp_path);
  test_hook(kStopInSaveEnv, state.global_step, SIGSTOP, temp_path);
  if (std::rename(temp_path.c_str(), final_path.c_str()) != 0) throw_errno("rename to", final_path);
  sync_path(dir, true);

  // Prune: older checkpoints beyond `keep`, and temporary files that a crashed save left behind.
  std::vector<std::string> all = list_checkpoints(dir);
  if (keep > 0 && all.size() > static_cast<size_t>(keep))
    for (size_t i = 0; i + keep < all.size(); ++i) fs::remove(all[i], ec);
  std::vector<fs::path> stale;
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (is_temp_name(entry.path().filename().string())) stale.push_back(entry.path());
  for (const fs::path& p : stale) fs::remove(p, ec);
  return final_path;
}

CheckpointState load_checkpoint(const std::string& path) {
  return detail::read_checkpoint_h5(resolve_checkpoint(path));
}

CheckpointState load_checkpoint_header(const std::string& path) {
  return detail::read_checkpoint_h5(resolve_checkpoint(path), true);
}

void check_compatible(const CheckpointState& state, const CheckpointExpectation& expected,
                      const std::string& path) {
  if (state.model_spec != expected.model_spec)
    throw UsageError("checkpoint " + path + " was written for model '" + state.model_spec +
                     "', this run's model is '" + expected.model_spec + "'");
  compare_tensors(state.params, expected.params, "parameter", path);
  compare_tensors(state.optimizer, expected.optimizer, "optimizer buffer", path);
  for (const std::string& name : expected.scalars)
    if (state.scalars.count(name) == 0)
      throw UsageError("checkpoint " + path + " lacks the scalar '" + name + "'");
}

}  // namespace lockstep
