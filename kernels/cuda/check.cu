#include <stdexcept>
#include <string>

#include "kernels/cuda/check.h"

namespace lockstep::kernels::detail {

namespace {

// The likely cause, in words a user can act on; null when the runtime's own words are enough.
const char* cuda_hint(cudaError_t code) {
  switch (code) {
    case cudaErrorInsufficientDriver:
      return "the NVIDIA driver is missing or older than this CUDA runtime: install or update the "
             "driver, or run with --device cpu";
    case cudaErrorNoDevice:
      return "no GPU is visible to this process: check nvidia-smi and CUDA_VISIBLE_DEVICES";
    case cudaErrorInvalidDevice:
      return "the device ordinal does not exist: check CUDA_VISIBLE_DEVICES and the ranks per node";
    case cudaErrorDevicesUnavailable:
      return "the GPU is busy or in exclusive-process mode: start one rank per GPU";
    case cudaErrorMemoryAllocation:
      return "out of GPU memory: reduce the batch size or the model, or look for other processes "
             "on this GPU (nvidia-smi)";
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorUnsupportedPtxVersion:
      return "this binary has no code for this GPU: reconfigure with "
             "-DCMAKE_CUDA_ARCHITECTURES=<compute capability, e.g. 90 for H100/H200>";
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
      return "a kernel accessed memory out of bounds: a buffer is smaller than its shape says, or "
             "a host pointer was passed as device memory (compute-sanitizer shows where)";
    case cudaErrorInvalidValue:
      return "an argument is invalid: a null or host pointer where device memory is expected, or a "
             "size out of range";
    case cudaErrorInvalidConfiguration:
      return "a launch configuration is out of range for this GPU: please report this as a bug";
    default: return nullptr;
  }
}

const char* cublas_hint(cublasStatus_t code) {
  switch (code) {
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "cuBLAS could not start: the CUDA driver or the GPU is not usable (check nvidia-smi)";
    case CUBLAS_STATUS_ALLOC_FAILED: return "out of GPU memory: reduce the batch size or the model";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "this GPU lacks a feature the call needs (bf16 GEMM needs compute capability 8.0+)";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "this combination of types and operations is not supported by cuBLAS on this GPU";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "a dimension or leading dimension is invalid: a bug in the caller's shape";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "the GPU failed to run the cuBLAS kernel: a previous kernel may have failed";
    default: return nullptr;
  }
}

[[noreturn]] void throw_message(const char* call, const std::string& reason, const char* file,
                                int line, const char* hint) {
  std::string msg =
      std::string(call) + " failed: " + reason + " at " + file + ":" + std::to_string(line);
  if (hint != nullptr) msg += std::string(" (hint: ") + hint + ")";
  throw std::runtime_error(msg);
}

}  // namespace

void throw_cuda_error(const char* call, cudaError_t code, const char* file, int line) {
  throw_message(call, std::string(cudaGetErrorName(code)) + ": " + cudaGetErrorString(code), file,
                line, cuda_hint(code));
}

void throw_cublas_error(const char* call, cublasStatus_t code, const char* file, int line) {
  throw_message(call, std::string(cublasGetStatusName(code)) + ": " + cublasGetStatusString(code),
                file, line, cublas_hint(code));
}

}  // namespace lockstep::kernels::detail
