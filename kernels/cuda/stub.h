// For the stand-ins (*_stub.cpp) of the CUDA twins (*.cu) in a build without CUDA: one way to say
// that a CUDA function was called there. Header-only, stateless.
// Thread-safe; no collective calls.
#pragma once

#include <stdexcept>
#include <string>

namespace lockstep::kernels {

[[noreturn]] inline void cuda_not_built(const char* what) {
  throw std::runtime_error(std::string(what) +
                           " needs the CUDA build (configure with -DLOCKSTEP_CUDA=ON)");
}

}  // namespace lockstep::kernels
