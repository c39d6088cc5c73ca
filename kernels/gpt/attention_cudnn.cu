// cuDNN's fused attention (attention_cudnn.h), through the graph API of NVIDIA's cudnn-frontend
// (header-only; its JSON serialisation left out; its library calls loaded at run time). Per
// (thread, device): a cuDNN handle, bound to the caller's stream at every call, and per shape the
// two graphs - the forward pass (its output and softmax statistics) and the backward pass (dQ, dK,
// dV; cuDNN's deterministic algorithm) - each built once with heuristics mode A, with one device
// workspace for both.
//
// The tensors as cuDNN sees them, dims [batch, heads, seq, head_dim]: Q, K and V in `heads`,
// [3][B * H][T][Dh] bf16 (strides H T Dh, T Dh, Dh, 1; what attention_flash_heads_cuda writes), or
// for the _packed calls in the qkv product's words [B, T, 3, H, Dh] (as dQ, dK, dV below); the
// output and its gradient [B, T, H, Dh] bf16 (T C, Dh, C, 1): the layout of out and dout, so one
// cast moves between them, and none where the projection reads the words (the bf16 calls); dQ,
// dK, dV into [B, T, 3, H, Dh] bf16 (T 3C, Dh, 3C, 1, at 0, C and 2C): the layout of dqkv, which
// the qkv product's backward pass can read as its bf16 dy. The statistics [B, H, T, 1] fp32.
#include <cudnn.h>
#include <dlfcn.h>

#include <cstring>  // before the frontend, whose shim calls std::strlen without including it

// The frontend's own calls into cuDNN, the CUDA runtime and driver, and NVRTC (which only its
// Blackwell engines use) through dlopen of the libraries the process has already loaded: the
// programs need no library at start-up that they did not need before.
#define NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING
#define CUDNN_FRONTEND_SKIP_JSON_LIB
#include <cudnn_frontend.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kernels/cast.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/memory.h"
#include "kernels/gpt/attention_cudnn.h"
#include "kernels/gpt/attention_flash.h"

// Where the frontend's dynamic loading looks up cuDNN's functions: the process's global scope, in
// which the programs' own link to libcudnn (for the convolutions) already put them.
void* cudnn_frontend::cudnn_dlhandle = RTLD_DEFAULT;

namespace lockstep::kernels {

namespace {

namespace fe = cudnn_frontend;

// The tensors' ids in the graphs' variant packs.
enum : int64_t { kQ = 1, kK, kV, kO, kStats, kDo, kDq, kDk, kDv };

struct Graphs {
  std::shared_ptr<fe::graph::Graph> forward, backward;
  void* workspace = nullptr;  // the larger of the two graphs' needs; kept until the process exits
  bool usable = false;
  std::string why;  // cuDNN's message where it refused
};

// Per (thread, device). The handles and workspaces are kept until the process exits, as
// cublas_handle.h explains for cuBLAS's.
struct State {
  cudnnHandle_t handle = nullptr;
  std::map<std::array<int, 5>, Graphs> graphs;  // by (batch, seq, heads, head_dim, packed)
};

State& state() {
  thread_local std::map<int, State> states;
  int device = 0;
  LS_CHECK_CUDA(cudaGetDevice(&device));
  State& st = states[device];
  if (st.handle == nullptr) {
    // The frontend's own CUDA runtime calls: the runtime this program links, not another major
    // version that a machine's Python wheels may also put on the library path (the frontend would
    // take the first it finds). A value the user set is kept.
    setenv("CUDNN_FRONTEND_CUDART_LIB_NAME",
           ("libcudart.so." + std::to_string(CUDART_VERSION / 1000)).c_str(), 0);
    const cudnnStatus_t rc = cudnnCreate(&st.handle);
    if (rc != CUDNN_STATUS_SUCCESS)
      throw std::runtime_error(std::string("cudnnCreate failed: ") + cudnnGetErrorString(rc));
  }
  return st;
}

struct Dims {
  int64_t b, h, t, d, c;
  explicit Dims(const AttentionShape& s)
      : b(s.batch), h(s.heads), t(s.seq), d(s.head_dim), c(int64_t{s.heads} * s.head_dim) {}
  std::vector<int64_t> dims() const { return {b, h, t, d}; }
  std::vector<int64_t> by_head() const { return {h * t * d, t * d, d, 1}; }  // Q, K, V
  std::vector<int64_t> by_row() const { return {t * c, d, c, 1}; }           // O, dO
  std::vector<int64_t> packed() const { return {t * 3 * c, d, 3 * c, 1}; }   // dQ, dK, dV
};

std::shared_ptr<fe::graph::Graph> new_graph() {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return g;
}

std::shared_ptr<fe::graph::Tensor_attributes> input(fe::graph::Graph& g, const char* name,
                                                    int64_t uid, const std::vector<int64_t>& dims,
                                                    const std::vector<int64_t>& strides) {
  return g.tensor(
      fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(dims).set_stride(strides));
}

// Validates and builds g; the empty string where cuDNN took it, else what it said.
std::string finish(fe::graph::Graph& g, cudnnHandle_t handle, int64_t& workspace) {
  auto step = [&](const char* what, fe::error_t e) {
    if (e.is_bad()) throw std::runtime_error(std::string(what) + ": " + e.get_message());
  };
  try {
    step("validate", g.validate());
    step("build_operation_graph", g.build_operation_graph(handle));
    step("create_execution_plans", g.create_execution_plans({fe::HeurMode_t::A}));
    step("check_support", g.check_support(handle));
    step("build_plans", g.build_plans(handle));
    int64_t bytes = 0;
    step("get_workspace_size", g.get_workspace_size(bytes));
    workspace = std::max(workspace, bytes);
  } catch (const std::exception& e) {
    return e.what();
  }
  return {};
}

// packed: Q, K and V in the qkv product's layout (the dQKV one), else in `heads`.
Graphs build_graphs(cudnnHandle_t handle, const AttentionShape& s, bool packed) {
  const Dims d(s);
  const std::vector<int64_t> qkv_strides = packed ? d.packed() : d.by_head();
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  const std::vector<int64_t> stats_dims{d.b, d.h, d.t, 1}, stats_strides{d.h * d.t, d.t, 1, 1};
  Graphs out;
  int64_t workspace = 0;

  out.forward = new_graph();
  fe::graph::Graph& f = *out.forward;
  auto [o, stats] =
      f.sdpa(input(f, "Q", kQ, d.dims(), qkv_strides), input(f, "K", kK, d.dims(), qkv_strides),
             input(f, "V", kV, d.dims(), qkv_strides),
             fe::graph::SDPA_attributes()
                 .set_name("attention")
                 .set_generate_stats(true)
                 .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                 .set_diagonal_band_right_bound(0)  // causal: key j <= query i
                 .set_attn_scale(scale));
  o->set_output(true).set_uid(kO).set_dim(d.dims()).set_stride(d.by_row());
  stats->set_output(true)
      .set_uid(kStats)
      .set_data_type(fe::DataType_t::FLOAT)
      .set_dim(stats_dims)
      .set_stride(stats_strides);
  std::string why = finish(f, handle, workspace);

  if (why.empty()) {
    out.backward = new_graph();
    fe::graph::Graph& b = *out.backward;
    auto stats_in = input(b, "Stats", kStats, stats_dims, stats_strides);
    stats_in->set_data_type(fe::DataType_t::FLOAT);
    auto [dq, dk, dv] = b.sdpa_backward(
        input(b, "Q", kQ, d.dims(), qkv_strides), input(b, "K", kK, d.dims(), qkv_strides),
        input(b, "V", kV, d.dims(), qkv_strides), input(b, "O", kO, d.dims(), d.by_row()),
        input(b, "dO", kDo, d.dims(), d.by_row()), stats_in,
        fe::graph::SDPA_backward_attributes()
            .set_name("attention_backward")
            .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
            .set_diagonal_band_right_bound(0)
            .set_attn_scale(scale)
            .set_deterministic_algorithm(true));
    for (auto [t, uid] : {std::pair{dq, kDq}, std::pair{dk, kDk}, std::pair{dv, kDv}})
      t->set_output(true).set_uid(uid).set_dim(d.dims()).set_stride(d.packed());
    why = finish(b, handle, workspace);
    if (!why.empty()) why = "backward: " + why;
  } else {
    why = "forward: " + why;
  }
  out.usable = why.empty();
  out.why = why;
  if (out.usable) out.workspace = cuda_alloc(static_cast<size_t>(workspace));
  return out;
}

// The shape's graphs, built once: what throws on the way (the frontend's graph calls, the
// workspace's allocation) leaves them unusable with its message, cached as cuDNN's refusals are,
// so that a shape is never built again at every layer's call.
Graphs build(cudnnHandle_t handle, const AttentionShape& s, bool packed) {
  try {
    return build_graphs(handle, s, packed);
  } catch (const std::exception& e) {
    Graphs out;
    out.usable = false;
    out.why = std::string("building the graphs: ") + e.what();
    return out;
  }
}

Graphs& graphs_for(const AttentionShape& s, bool packed) {
  State& st = state();
  const std::array<int, 5> key{s.batch, s.seq, s.heads, s.head_dim, packed ? 1 : 0};
  auto it = st.graphs.find(key);
  if (it == st.graphs.end()) it = st.graphs.emplace(key, build(st.handle, s, packed)).first;
  return it->second;
}

void check(const AttentionShape& s, std::initializer_list<const void*> pointers, const char* who) {
  check_attention_shape(s, who);
  if (s.head_dim % 8 != 0)
    throw std::invalid_argument(std::string(who) + ": head_dim " + std::to_string(s.head_dim) +
                                " is not a multiple of 8");
  for (const void* p : pointers)
    if (reinterpret_cast<std::uintptr_t>(p) % 16 != 0)
      throw std::invalid_argument(std::string(who) + ": buffers must start on 16 bytes");
}

Graphs& usable_graphs(const AttentionShape& s, const char* who, bool packed = false) {
  Graphs& g = graphs_for(s, packed);
  if (!g.usable) throw std::runtime_error(std::string(who) + ": cuDNN refused the shape: " + g.why);
  return g;
}

void run(const fe::graph::Graph& g, std::unordered_map<int64_t, void*>& pointers, void* workspace,
         cudaStream_t stream, const char* who) {
  cudnnHandle_t handle = state().handle;
  const cudnnStatus_t rc = cudnnSetStream(handle, stream);
  if (rc != CUDNN_STATUS_SUCCESS)
    throw std::runtime_error(std::string(who) + ": cudnnSetStream: " + cudnnGetErrorString(rc));
  fe::error_t e = g.execute(handle, pointers, workspace);
  if (e.is_bad()) throw std::runtime_error(std::string(who) + ": " + e.get_message());
}

}  // namespace

bool attention_cudnn_built() { return true; }

bool attention_cudnn_usable(const AttentionShape& s, std::string* why, bool packed) {
  if (s.head_dim % 8 != 0) {
    if (why != nullptr) *why = "head_dim " + std::to_string(s.head_dim) + " is not a multiple of 8";
    return false;
  }
  try {
    const Graphs& g = graphs_for(s, packed);
    if (why != nullptr) *why = g.why;
    return g.usable;
  } catch (const std::exception& e) {  // no handle (no device, no cuDNN), or no memory for it
    if (why != nullptr) *why = e.what();
    return false;
  }
}

namespace {

// Where Q, K and V start for the graphs: the heads buffer's three planes (n elements each), or in
// place in the qkv product's words (the three column blocks of a row, C apart; packed graphs).
struct QkvAt {
  uint16_t *q, *k, *v;
  bool packed;
};
QkvAt by_heads(const uint16_t* heads, size_t n) {
  auto* h = const_cast<uint16_t*>(heads);
  return {h, h + n, h + 2 * n, false};
}
QkvAt in_place(const uint16_t* qkv16, size_t c) {
  auto* q = const_cast<uint16_t*>(qkv16);
  return {q, q + c, q + 2 * c, true};
}

void run_forward(const AttentionShape& s, const QkvAt& in, uint16_t* out16, float* lse,
                 cudaStream_t stream, const char* who) {
  Graphs& g = usable_graphs(s, who, in.packed);
  std::unordered_map<int64_t, void*> pointers{
      {kQ, in.q}, {kK, in.k}, {kV, in.v}, {kO, out16}, {kStats, lse}};
  run(*g.forward, pointers, g.workspace, stream, who);
}

// dQ, dK and dV into dqkv16's packed layout, whichever layout Q, K and V come in.
void run_backward(const AttentionShape& s, const QkvAt& in, const uint16_t* out16, const float* lse,
                  const uint16_t* dout16, uint16_t* dqkv16, cudaStream_t stream, const char* who) {
  Graphs& g = usable_graphs(s, who, in.packed);
  const size_t c = static_cast<size_t>(s.channels());
  std::unordered_map<int64_t, void*> pointers{{kQ, in.q},
                                              {kK, in.k},
                                              {kV, in.v},
                                              {kO, const_cast<uint16_t*>(out16)},
                                              {kStats, const_cast<float*>(lse)},
                                              {kDo, const_cast<uint16_t*>(dout16)},
                                              {kDq, dqkv16},
                                              {kDk, dqkv16 + c},
                                              {kDv, dqkv16 + 2 * c}};
  run(*g.backward, pointers, g.workspace, stream, who);
}

}  // namespace

void attention_cudnn_forward_bf16_cuda(const AttentionShape& s, const float* qkv, uint16_t* out16,
                                       uint16_t* heads, float* lse, cudaStream_t stream) {
  const char* who = "attention_cudnn_forward_bf16_cuda";
  check(s, {qkv, out16, heads, lse}, who);
  if (s.batch == 0) return;
  usable_graphs(s, who);  // a refusal throws before the heads are written
  const size_t n = static_cast<size_t>(s.batch) * s.seq * s.channels();
  attention_flash_heads_cuda(s, qkv, heads, stream);
  run_forward(s, by_heads(heads, n), out16, lse, stream, who);
}

void attention_cudnn_forward_cuda(const AttentionShape& s, const float* qkv, float* out,
                                  uint16_t* heads, float* lse, cudaStream_t stream) {
  check(s, {qkv, out, heads, lse}, "attention_cudnn_forward_cuda");
  const size_t n = static_cast<size_t>(s.batch) * s.seq * s.channels();
  uint16_t* o = heads + 3 * n;  // kept there for the backward pass
  attention_cudnn_forward_bf16_cuda(s, qkv, o, heads, lse, stream);
  if (n > 0) cast_bf16_to_f32_cuda(o, out, n, stream);
}

void attention_cudnn_backward_bf16_cuda(const AttentionShape& s, const uint16_t* heads,
                                        const uint16_t* out16, const float* lse, const float* dout,
                                        uint16_t* dqkv16, float* workspace, cudaStream_t stream) {
  const char* who = "attention_cudnn_backward_bf16_cuda";
  check(s, {heads, out16, lse, dout, dqkv16, workspace}, who);
  if (s.batch == 0) return;
  usable_graphs(s, who);  // a refusal throws before dO is cast
  const size_t n = static_cast<size_t>(s.batch) * s.seq * s.channels();
  auto* d_o = reinterpret_cast<uint16_t*>(workspace);
  cast_f32_to_bf16_cuda(dout, d_o, n, stream);
  run_backward(s, by_heads(heads, n), out16, lse, d_o, dqkv16, stream, who);
}

void attention_cudnn_backward_cuda(const AttentionShape& s, const uint16_t* heads, const float* lse,
                                   const float* dout, float* dqkv, float* workspace,
                                   cudaStream_t stream) {
  check(s, {heads, lse, dout, dqkv, workspace}, "attention_cudnn_backward_cuda");
  const size_t n = static_cast<size_t>(s.batch) * s.seq * s.channels();
  uint16_t* d_qkv = reinterpret_cast<uint16_t*>(workspace) + n;  // after dO's words
  attention_cudnn_backward_bf16_cuda(s, heads, heads + 3 * n, lse, dout, d_qkv, workspace, stream);
  if (n > 0) cast_bf16_to_f32_cuda(d_qkv, dqkv, 3 * n, stream);
}

void attention_cudnn_forward_packed_cuda(const AttentionShape& s, const uint16_t* qkv16,
                                         uint16_t* out16, float* lse, cudaStream_t stream) {
  const char* who = "attention_cudnn_forward_packed_cuda";
  check(s, {qkv16, out16, lse}, who);
  if (s.batch == 0) return;
  run_forward(s, in_place(qkv16, static_cast<size_t>(s.channels())), out16, lse, stream, who);
}

void attention_cudnn_backward_packed_cuda(const AttentionShape& s, const uint16_t* qkv16,
                                          const uint16_t* out16, const float* lse,
                                          const uint16_t* dout16, uint16_t* dqkv16,
                                          cudaStream_t stream) {
  const char* who = "attention_cudnn_backward_packed_cuda";
  check(s, {qkv16, out16, lse, dout16, dqkv16}, who);
  if (s.batch == 0) return;
  run_backward(s, in_place(qkv16, static_cast<size_t>(s.channels())), out16, lse, dout16, dqkv16,
               stream, who);
}

}  // namespace lockstep::kernels
