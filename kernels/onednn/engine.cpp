#include <omp.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/onednn/onednn.h"
#include "kernels/onednn/util.h"

namespace lockstep::kernels {

bool onednn_built() { return true; }

int onednn_thread_limit() { return std::max(1, omp_get_thread_limit()); }

void onednn_set_threads(int threads) {
  omp_set_dynamic(0);
  omp_set_num_threads(std::clamp(threads, 1, onednn_thread_limit()));
}

// The ISA values are bit sets: each AVX-512 flavour (VNNI, bf16, AMX) holds avx512_core's bits.
bool onednn_avx512() {
  const auto core = static_cast<unsigned>(dnnl::cpu_isa::avx512_core);
  return (static_cast<unsigned>(dnnl::get_effective_cpu_isa()) & core) == core;
}

const char* onednn_description() {
  static const std::string text = [] {
    const dnnl_version_t* v = dnnl_version();
    std::string isa;
    switch (dnnl::get_effective_cpu_isa()) {
      case dnnl::cpu_isa::sse41: isa = "SSE4.1"; break;
      case dnnl::cpu_isa::avx: isa = "AVX"; break;
      case dnnl::cpu_isa::avx2: isa = "AVX2"; break;
      case dnnl::cpu_isa::avx2_vnni: isa = "AVX2 VNNI"; break;
      case dnnl::cpu_isa::avx512_core: isa = "AVX-512"; break;
      // The bf16 flavours: oneDNN's bf16 matmul runs on dot-product instructions there, and only
      // emulated on plain AVX-512 (gemm_bf16_onednn; lockstep-bench gemm --precision bf16).
      case dnnl::cpu_isa::avx512_core_vnni: isa = "AVX-512 VNNI"; break;
      case dnnl::cpu_isa::avx512_core_bf16: isa = "AVX-512 BF16"; break;
      case dnnl::cpu_isa::avx512_core_amx: isa = "AVX-512 AMX"; break;
      default:
        isa = (onednn_avx512() ? "AVX-512, ISA " : "ISA ") +
              std::to_string(static_cast<int>(dnnl::get_effective_cpu_isa()));
    }
    return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
           std::to_string(v->patch) + " (OpenMP, " + isa + ")";
  }();
  return text.c_str();
}

namespace onednn {

int planning_threads() { return omp_get_max_threads(); }

dnnl::engine& engine() {
  // Each thread's first call: the team oneDNN will ask for is one OpenMP will give (onednn.h).
  thread_local const bool whole_team = [] {
    onednn_set_threads(omp_get_max_threads());
    return true;
  }();
  (void)whole_team;
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

dnnl::stream& stream() {
  thread_local dnnl::stream s(engine());
  return s;
}

dnnl::primitive_attr user_scratchpad(dnnl::primitive_attr attr) {
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

Staged::Staged(Role role, const dnnl::memory::desc& user, const dnnl::memory::desc& wanted)
    : user_(user, engine(), DNNL_MEMORY_NONE), staged_(role == Role::accumulate || user != wanted) {
  if (!staged_) return;
  own_ = dnnl::memory(wanted, engine());
  dnnl::primitive_attr attr;
  if (role == Role::accumulate) {
    dnnl::post_ops add;
    add.append_sum(1.0f);
    attr.set_post_ops(add);
  }
  reorder_ =
      role == Role::input
          ? dnnl::reorder(dnnl::reorder::primitive_desc(engine(), user, engine(), wanted))
          : dnnl::reorder(dnnl::reorder::primitive_desc(engine(), wanted, engine(), user, attr));
}

dnnl::memory& Staged::in(const void* data) {
  user_.set_data_handle(const_cast<void*>(data));
  if (!staged_) return user_;
  reorder_.execute(stream(), user_, own_);
  return own_;
}

dnnl::memory& Staged::out(void* data) {
  user_.set_data_handle(data);
  return staged_ ? own_ : user_;
}

void Staged::finish() {
  if (staged_) reorder_.execute(stream(), own_, user_);
}

void rethrow(const char* who, const dnnl::error& e) {
  throw std::runtime_error(std::string(who) + ": oneDNN failed (status " +
                           std::to_string(static_cast<int>(e.status)) + "): " + e.what());
}

}  // namespace onednn
}  // namespace lockstep::kernels
