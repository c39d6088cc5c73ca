#include "runtime/base/build_info.h"

#include "lockstep/version.h"

// CMake defines these for this file only (runtime/CMakeLists.txt), so a change of build options
// recompiles one file.
#ifndef LOCKSTEP_BUILT_CUDA
#error "build_info.cpp is compiled with LOCKSTEP_BUILT_CUDA, _NCCL, _ONEDNN, _NVTX and _BLAS set"
#endif

namespace lockstep {

const BuildInfo& build_info() {
  static const BuildInfo info{LOCKSTEP_VERSION_STRING,  LOCKSTEP_BUILT_CUDA != 0,
                              LOCKSTEP_BUILT_NCCL != 0, LOCKSTEP_BUILT_ONEDNN != 0,
                              LOCKSTEP_BUILT_NVTX != 0, LOCKSTEP_BUILT_BLAS};
  return info;
}

std::string version_text(const std::string& program) {
  const BuildInfo& b = build_info();
  auto yes = [](bool v) { return v ? "yes" : "no"; };
  return program + " " + b.version + "\nbuild: cuda=" + yes(b.cuda) + " nccl=" + yes(b.nccl) +
         " onednn=" + yes(b.onednn) + " nvtx=" + yes(b.nvtx) + " blas=" + b.blas + "\n";
}

}  // namespace lockstep
