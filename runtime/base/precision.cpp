#include "runtime/base/precision.h"

#include "runtime/base/error.h"

namespace lockstep {

Precision parse_precision(const std::string& text, const char* option) {
  if (text == "fp32") return Precision::fp32;
  if (text == "bf16") return Precision::bf16;
  throw UsageError(std::string(option) + " must be fp32 or bf16, not '" + text + "'");
}

const char* precision_name(Precision p) { return p == Precision::bf16 ? "bf16" : "fp32"; }

std::string gpu_training_missing() {
  return "GPU training needs the CUDA build: this binary was built without CUDA (configure with "
         "-DLOCKSTEP_CUDA=ON on a machine with nvcc and NCCL)";
}

}  // namespace lockstep
