// What this build of Lockstep is: its version and the optional parts it was built with. The
// programs print it for --version; a program built against the library can log it. The facts are
// fixed when the library is compiled (CMake passes them to build_info.cpp alone), so they describe
// the library a program linked, not the headers it was compiled against (<lockstep/version.h>).
// Thread-safe: the values are constants.
// No collective calls.
#pragma once

#include <string>

namespace lockstep {

struct BuildInfo {
  const char* version;  // "0.2.0", as LOCKSTEP_VERSION_STRING
  bool cuda;            // the CUDA kernels and the device step (LOCKSTEP_CUDA)
  bool nccl;            // the NCCL communicator
  bool onednn;          // the CPU layers on oneDNN (LOCKSTEP_ONEDNN)
  bool nvtx;            // Nsight ranges (the header-only nvtx3 was found)
  const char* blas;     // the BLAS vendor: "OpenBLAS", else the library's name
};

const BuildInfo& build_info();

// Two lines for --version: "<program> <version>" and "build: cuda=yes nccl=yes onednn=yes
// nvtx=yes blas=OpenBLAS", each ending in a newline.
std::string version_text(const std::string& program);

}  // namespace lockstep
