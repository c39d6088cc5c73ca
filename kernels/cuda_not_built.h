// For the per-file CUDA stubs (*_stub.cpp), which stand in for x.cu when CUDA is not built: the
// one exception every stubbed *_cuda function throws, naming itself and the build it needs (the
// same words as kernels/cuda_stub.cpp).
#pragma once

#include <stdexcept>
#include <string>

namespace lockstep::kernels::detail {

[[noreturn]] inline void cuda_not_built(const char* what) {
  throw std::runtime_error(std::string(what) +
                           " needs the CUDA build (configure with -DLOCKSTEP_CUDA=ON)");
}

}  // namespace lockstep::kernels::detail
