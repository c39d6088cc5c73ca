// Small helpers over the HDF5 C API, shared by the data loader, lockstep-data and checkpoints.
//
//  - H5Id owns one hid_t (file, group, dataset, dataspace, datatype, attribute or property
//    list) and closes it with the matching H5?close when it goes out of scope.
//  - LS_CHECK_HDF5(call) checks a call's herr_t/hid_t/htri_t result (negative = failure) and throws
//    Error "[rank r/P host] <call> failed: <HDF5's own reason> at file:line (hint: ...)". It
//    evaluates to the call's result, so it wraps both statements and initialisers.
//  - open_h5_readonly turns every way a user's file can be unusable (missing, not HDF5, truncated)
//    into a UsageError naming the file.
//
// Thread-safety: the HDF5 build is not thread-safe, so every HDF5 call in Lockstep runs under the
// one process-wide recursive mutex behind Hdf5Lock (the loader's prefetch thread and the main
// thread's checkpoint code may both touch HDF5). Taking an Hdf5Lock also switches off HDF5's own
// printing of its error stack on that thread: users see our message, not an HDF5 dump.
// No collective calls.
#pragma once

#include <hdf5.h>

#include <mutex>
#include <string>

#include "runtime/base/error.h"

namespace lockstep {

class Hdf5Lock {
 public:
  Hdf5Lock();
  Hdf5Lock(const Hdf5Lock&) = delete;
  Hdf5Lock& operator=(const Hdf5Lock&) = delete;

 private:
  std::unique_lock<std::recursive_mutex> lock_;
};

class H5Id {
 public:
  H5Id() = default;
  explicit H5Id(hid_t id) : id_(id) {}
  ~H5Id() { reset(); }
  H5Id(H5Id&& other) noexcept : id_(other.release()) {}
  H5Id& operator=(H5Id&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  H5Id(const H5Id&) = delete;
  H5Id& operator=(const H5Id&) = delete;

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  hid_t release() {
    hid_t id = id_;
    id_ = H5I_INVALID_HID;
    return id;
  }
  void reset(hid_t id = H5I_INVALID_HID);

 private:
  hid_t id_ = H5I_INVALID_HID;
};

// HDF5's error stack for this thread in one line: the outermost and innermost descriptions, e.g.
// "unable to open file (truncated file: eof = 4096, sblock->base_addr = 0, stored_eof = 8192)".
// Clears the stack. Empty when nothing is recorded.
std::string hdf5_error_text();

// The same, except that when a system call failed beneath HDF5 (its POSIX driver records "errno =
// 28, error message = ..."), only that call's reason, e.g. "No space left on device": what a user
// needs to know about a failed write. Clears the stack.
std::string hdf5_system_error_text();

// Why H5Fopen failed on an existing HDF5 file, from HDF5's error stack (cleared): where another
// process holds the file's lock (to read, it has the file open for writing: h5py's 'a' mode, a
// writer still running; `to_write`, it has the file open at all) a sentence saying so and what to
// do; else `otherwise` with HDF5's reason in brackets.
std::string h5_open_failure(const std::string& otherwise, bool to_write = false);

// Opens an existing file read-only (H5F_ACC_RDONLY). Throws UsageError naming the file when it is
// missing, unreadable, not HDF5, damaged (HDF5's reason is included), or open for writing in
// another process (h5_open_failure).
// `fapl` is a file-access property list (H5P_DEFAULT for the defaults).
H5Id open_h5_readonly(const std::string& path, hid_t fapl = H5P_DEFAULT);

// Whether `name` is a link directly inside `loc` (no path walking: "a/b" is not looked up).
bool h5_has_child(hid_t loc, const std::string& name);

namespace detail {
[[noreturn]] void throw_hdf5_error(const char* call, const char* file, int line);

template <class T>
T check_hdf5(T value, const char* call, const char* file, int line) {
  if (value < 0) throw_hdf5_error(call, file, line);
  return value;
}
}  // namespace detail

}  // namespace lockstep

#define LS_CHECK_HDF5(call) ::lockstep::detail::check_hdf5((call), #call, __FILE__, __LINE__)
