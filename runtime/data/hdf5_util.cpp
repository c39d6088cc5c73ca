#include "runtime/data/hdf5_util.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

namespace lockstep {
namespace {

std::recursive_mutex& hdf5_mutex() {
  static std::recursive_mutex m;
  return m;
}

struct ErrorWalk {
  std::vector<std::string> descriptions;  // outermost (API call) first
};

herr_t collect_error(unsigned, const H5E_error2_t* e, void* data) {
  auto* walk = static_cast<ErrorWalk*>(data);
  std::string text = e->desc != nullptr ? e->desc : "";
  if (text.empty() && e->func_name != nullptr) text = std::string(e->func_name) + "() failed";
  if (!text.empty()) walk->descriptions.push_back(text);
  return 0;
}

}  // namespace

Hdf5Lock::Hdf5Lock() : lock_(hdf5_mutex()) {
  // The error stack's printing setting is per thread in thread-safe HDF5 builds and global
  // otherwise; doing it once per thread covers both.
  thread_local bool quiet = false;
  if (!quiet) {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    quiet = true;
  }
}

void H5Id::reset(hid_t id) {
  if (id_ >= 0) {
    Hdf5Lock lock;
    switch (H5Iget_type(id_)) {
      case H5I_FILE: H5Fclose(id_); break;
      case H5I_GROUP: H5Gclose(id_); break;
      case H5I_DATASET: H5Dclose(id_); break;
      case H5I_DATASPACE: H5Sclose(id_); break;
      case H5I_DATATYPE: H5Tclose(id_); break;
      case H5I_ATTR: H5Aclose(id_); break;
      case H5I_GENPROP_LST: H5Pclose(id_); break;
      default: H5Idec_ref(id_); break;
    }
  }
  id_ = id;
}

std::string hdf5_error_text() {
  Hdf5Lock lock;
  ErrorWalk walk;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collect_error, &walk);
  H5Eclear2(H5E_DEFAULT);
  if (walk.descriptions.empty()) return "";
  const std::string& outer = walk.descriptions.front();
  const std::string& inner = walk.descriptions.back();
  if (walk.descriptions.size() == 1 || outer == inner) return outer;
  return outer + " (" + inner + ")";
}

namespace {
// The errno an HDF5 error description names ("..., errno = 28, error message = ..."); 0 if none.
int errno_named_in(const std::string& description) {
  const size_t at = description.find("errno = ");
  return at == std::string::npos ? 0 : std::atoi(description.c_str() + at + 8);
}
}  // namespace

std::string hdf5_system_error_text() {
  Hdf5Lock lock;
  ErrorWalk walk;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collect_error, &walk);
  // The innermost record that names an errno is the failed read, write or close.
  for (auto it = walk.descriptions.rbegin(); it != walk.descriptions.rend(); ++it) {
    if (const int code = errno_named_in(*it); code > 0) {
      H5Eclear2(H5E_DEFAULT);
      return std::strerror(code);
    }
  }
  return hdf5_error_text();
}

std::string h5_open_failure(const std::string& otherwise, bool to_write) {
  const std::string reason = hdf5_error_text();
  // HDF5 1.10+ locks a file it opens (flock: shared to read, exclusive to write) unless
  // HDF5_USE_FILE_LOCKING=FALSE; its message is "unable to lock file, errno = 11, ...".
  if (reason.find("unable to lock file") != std::string::npos) {
    const int code = errno_named_in(reason);
    if (code == EAGAIN && to_write)
      return "another process has it open (it holds HDF5's lock on the file); wait until that "
             "process closes it";
    if (code == EAGAIN)
      return "another process has it open for writing (it holds HDF5's lock on the file); wait "
             "until that process closes it, or, if nothing is changing the file, set "
             "HDF5_USE_FILE_LOCKING=FALSE";
    return "its file system refused HDF5's lock on the file (" +
           std::string(code > 0 ? std::strerror(code) : reason) +
           "); set HDF5_USE_FILE_LOCKING=FALSE where nothing writes the file while it is read";
  }
  return reason.empty() ? otherwise : otherwise + " (" + reason + ")";
}

H5Id open_h5_readonly(const std::string& path, hid_t fapl) {
  Hdf5Lock lock;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw UsageError(path + ": no such file");
  if (std::filesystem::is_directory(path, ec))
    throw UsageError(path + ": is a directory, not an HDF5 file");
  if (FILE* f = std::fopen(path.c_str(), "rb")) {
    std::fclose(f);
  } else {
    throw UsageError(path + ": cannot be read (" + std::strerror(errno) + ")");
  }
  htri_t is_hdf5 = H5Fis_hdf5(path.c_str());
  if (is_hdf5 <= 0) {
    hdf5_error_text();
    throw UsageError(path + ": not an HDF5 file (no HDF5 signature found)");
  }
  hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl);
  if (id < 0)
    throw UsageError(path + ": " +
                     h5_open_failure("HDF5 cannot open it, the file is damaged or truncated"));
  return H5Id(id);
}

bool h5_has_child(hid_t loc, const std::string& name) {
  Hdf5Lock lock;
  if (name.empty() || name.find('/') != std::string::npos) return false;
  htri_t exists = H5Lexists(loc, name.c_str(), H5P_DEFAULT);
  if (exists < 0) {
    hdf5_error_text();
    return false;
  }
  return exists > 0;
}

namespace detail {
void throw_hdf5_error(const char* call, const char* file, int line) {
  std::string reason = hdf5_error_text();
  if (reason.empty()) reason = "HDF5 reported an error";
  throw_call_error(call, reason, file, line,
                   "the file may be damaged or written by an incompatible tool; "
                   "`h5dump -H FILE` shows what HDF5 sees");
}
}  // namespace detail

}  // namespace lockstep
