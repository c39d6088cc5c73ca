// Stands in for the oneDNN twins in a build without oneDNN (onednn.h): onednn_built() is false,
// and calling a twin is a programming error, reported as such.
#include <climits>
#include <stdexcept>
#include <string>

#include "kernels/conv/conv2d.h"
#include "kernels/gemm.h"
#include "kernels/onednn/onednn.h"

namespace lockstep::kernels {

namespace {
[[noreturn]] void missing(const char* who) {
  throw std::logic_error(std::string(who) +
                         ": this build has no oneDNN (LOCKSTEP_ONEDNN=OFF or libdnnl-dev missing); "
                         "check onednn_built() first");
}
}  // namespace

bool onednn_built() { return false; }
void onednn_set_threads(int) {}
int onednn_thread_limit() { return INT_MAX; }
const char* onednn_description() { return "none"; }
bool onednn_avx512() { return false; }

void conv2d_forward_onednn(const Conv2dShape&, const float*, const float*, const float*, float*,
                           Conv2dIo) {
  missing("conv2d_forward_onednn");
}
void conv2d_backward_onednn(const Conv2dShape&, const float*, const float*, const float*, float*,
                            float*, float*, Conv2dIo) {
  missing("conv2d_backward_onednn");
}
bool conv2d_onednn_blocked16(const Conv2dShape&, Conv2dIo) { return false; }
void gemm_onednn(const GemmShape&, const float*, const float*, float*) { missing("gemm_onednn"); }
void gemm_bias_onednn(const GemmShape&, const float*, const float*, const float*, float*) {
  missing("gemm_bias_onednn");
}
void gemm_bf16_onednn(const GemmShape&, const uint16_t*, const uint16_t*, float*) {
  missing("gemm_bf16_onednn");
}

}  // namespace lockstep::kernels
