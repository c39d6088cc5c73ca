#include "runtime/model/gpt_decoder.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <map>
#include <string>

#include "kernels/cuda/memory.h"
#include "kernels/dense.h"
#include "kernels/gemm.h"
#include "kernels/gpt/decode.h"
#include "kernels/gpt/gelu.h"
#include "kernels/gpt/layernorm.h"
#include "kernels/gpt/residual.h"
#include "runtime/base/error.h"
#include "runtime/base/log.h"

namespace lockstep {

GptDecoder::GptDecoder(const Model& model) : device_(model.device()), stream_(model.stream()) {
  if (device_ == DeviceKind::cpu) params_ = model.params_to_host();
  const float* base = device_ == DeviceKind::cpu ? params_.data() : model.params();
  const std::vector<LayerPlan>& plan = model.plan();
  if (plan.size() < 3 || plan.front().spec.type != "embed" || plan.back().spec.type != "lmhead")
    throw UsageError("the key/value-cache decoder needs a gpt: model (embed, blocks, lmhead)");
  std::map<std::string, const float*> at;
  std::map<std::string, std::vector<int64_t>> shape;
  for (const ParamTensorInfo& t : model.param_tensors()) {
    at[t.name] = base + t.offset;
    shape[t.name] = t.shape;
  }
  const auto find = [&](const std::string& name) {
    const auto it = at.find(name);
    if (it == at.end()) throw UsageError("the gpt: model has no parameter " + name);
    return it->second;
  };
  const std::string embed = "embed0.";
  wte_ = find(embed + "wte");
  wpe_ = find(embed + "wpe");
  vocab_ = static_cast<int>(shape[embed + "wte"][0]);
  dim_ = static_cast<int>(shape[embed + "wte"][1]);
  ctx_ = static_cast<int>(shape[embed + "wpe"][0]);
  for (size_t i = 1; i + 1 < plan.size(); ++i) {
    if (plan[i].spec.type != "block")
      throw UsageError("the key/value-cache decoder takes embed, blocks and an lmhead only");
    heads_ = plan[i].spec.args[0];
    const std::string b = "block" + std::to_string(i) + ".";
    Block blk{find(b + "ln1.weight"),
              find(b + "ln1.bias"),
              find(b + "attn.qkv.weight"),
              find(b + "attn.qkv.bias"),
              find(b + "attn.proj.weight"),
              find(b + "attn.proj.bias"),
              find(b + "ln2.weight"),
              find(b + "ln2.bias"),
              find(b + "mlp.fc.weight"),
              find(b + "mlp.fc.bias"),
              find(b + "mlp.proj.weight"),
              find(b + "mlp.proj.bias"),
              Buffer<float>(device_, static_cast<size_t>(ctx_) * dim_),
              Buffer<float>(device_, static_cast<size_t>(ctx_) * dim_)};
    blocks_.push_back(std::move(blk));
  }
  const std::string head = "lmhead" + std::to_string(plan.size() - 1) + ".";
  lnf_w_ = find(head + "ln.weight");
  lnf_b_ = find(head + "ln.bias");
  const size_t d = static_cast<size_t>(dim_);
  x_ = Buffer<float>(device_, d);
  h_ = Buffer<float>(device_, d);
  qkv_ = Buffer<float>(device_, 3 * d);
  att_ = Buffer<float>(device_, d);
  tmp_ = Buffer<float>(device_, d);
  hidden_ = Buffer<float>(device_, 4 * d);
  act_ = Buffer<float>(device_, 4 * d);
  logits_ = Buffer<float>(device_, static_cast<size_t>(vocab_));
  stats_ = Buffer<float>(device_, 2);  // a layer norm's mean and 1/std
  scores_.resize(static_cast<size_t>(ctx_));
  host_logits_.resize(static_cast<size_t>(vocab_));
  if (device_ == DeviceKind::cuda) {
    at_ = Buffer<int>(device_, 2);
    at_host_ = static_cast<int*>(kernels::cuda_host_alloc(2 * sizeof(int)));
    // The legacy default stream (a model placed without a stream: lockstep-generate's) cannot be
    // captured. A stream of our own, created blocking, is ordered with the legacy stream's work
    // both ways, so the model's own calls there still see the decoder's and the reverse.
    if (stream_ == nullptr) stream_ = owned_stream_ = kernels::cuda_stream_create();
  }
}

GptDecoder::~GptDecoder() {
  kernels::cuda_graph_destroy(graph_);
  kernels::cuda_host_free(at_host_);
  kernels::cuda_stream_destroy(owned_stream_);
}

const float* GptDecoder::step(int token) {
  if (pos_ >= ctx_ || token < 0 || token >= vocab_)
    throw Error("GptDecoder::step: position " + std::to_string(pos_) + " of " +
                std::to_string(ctx_) + ", token " + std::to_string(token));
  if (device_ == DeviceKind::cuda)
    step_cuda(token);
  else
    step_cpu(token);
  ++pos_;
  return host_logits_.data();
}

void GptDecoder::step_cpu(int token) {
  const int D = dim_, Dh = dim_ / heads_;
  const size_t d = static_cast<size_t>(D);
  float* x = x_.data();
  float* h = h_.data();
  float* qkv = qkv_.data();
  float* att = att_.data();
  float* tmp = tmp_.data();
  float* hidden = hidden_.data();
  float* act = act_.data();
  float mean, rstd;
  for (size_t j = 0; j < d; ++j)
    x[j] = wte_[static_cast<size_t>(token) * d + j] + wpe_[static_cast<size_t>(pos_) * d + j];
  const float scale = 1.0f / std::sqrt(static_cast<float>(Dh));
  for (Block& b : blocks_) {
    kernels::layernorm_forward_cpu({1, D}, x, b.ln1_w, b.ln1_b, h, &mean, &rstd);
    kernels::dense_forward_cpu({1, D, 3 * D}, h, b.qkv_w, b.qkv_b, qkv);
    std::copy_n(qkv + D, D, b.keys.data() + pos_ * d);
    std::copy_n(qkv + 2 * D, D, b.values.data() + pos_ * d);
    for (int hd = 0; hd < heads_; ++hd) {
      const float* q = qkv + hd * Dh;
      float top = -INFINITY;
      for (int t = 0; t <= pos_; ++t) {
        const float* k = b.keys.data() + static_cast<size_t>(t) * d + hd * Dh;
        float s = 0.0f;
        for (int j = 0; j < Dh; ++j) s += q[j] * k[j];
        scores_[t] = s * scale;
        top = std::max(top, scores_[t]);
      }
      float sum = 0.0f;
      for (int t = 0; t <= pos_; ++t) sum += (scores_[t] = std::exp(scores_[t] - top));
      float* out = att + hd * Dh;
      std::fill(out, out + Dh, 0.0f);
      for (int t = 0; t <= pos_; ++t) {
        const float p = scores_[t] / sum;
        const float* v = b.values.data() + static_cast<size_t>(t) * d + hd * Dh;
        for (int j = 0; j < Dh; ++j) out[j] += p * v[j];
      }
    }
    kernels::dense_forward_cpu({1, D, D}, att, b.proj_w, b.proj_b, tmp);
    for (size_t j = 0; j < d; ++j) x[j] += tmp[j];
    kernels::layernorm_forward_cpu({1, D}, x, b.ln2_w, b.ln2_b, h, &mean, &rstd);
    kernels::dense_forward_cpu({1, D, 4 * D}, h, b.fc_w, b.fc_b, hidden);
    kernels::gelu_forward_cpu(hidden, act, 4 * d);
    kernels::dense_forward_cpu({1, 4 * D, D}, act, b.mproj_w, b.mproj_b, tmp);
    for (size_t j = 0; j < d; ++j) x[j] += tmp[j];
  }
  kernels::layernorm_forward_cpu({1, D}, x, lnf_w_, lnf_b_, h, &mean, &rstd);
  for (int v = 0; v < vocab_; ++v) {  // tied head: logits = ln(x) wte^T
    const float* w = wte_ + static_cast<size_t>(v) * d;
    float s = 0.0f;
    for (size_t j = 0; j < d; ++j) s += h[j] * w[j];
    host_logits_[v] = s;
  }
}

void GptDecoder::step_cuda(int token) {
  // The previous step's copy has finished (the stream was synchronised): at_host_ is free.
  at_host_[0] = pos_;
  at_host_[1] = token;
  kernels::cuda_copy_to_device_async(at_.data(), at_host_, 2 * sizeof(int), stream_);
  // The first step launches its kernels one by one (cuBLAS sets itself up outside a capture); the
  // second records them once, and every step from then on replays the record.
  if (graph_ == nullptr && !graph_tried_ && eager_steps_ >= 1) {
    graph_tried_ = true;
    std::string why;
    try {
      kernels::cuda_capture_begin(stream_);
      enqueue_cuda();
      graph_ = kernels::cuda_capture_end(stream_, &why);
    } catch (const std::exception& e) {
      kernels::cuda_capture_discard(stream_);
      why = e.what();
    }
    if (graph_ == nullptr) {
      LS_LOG(debug) << "the decoder's step could not be captured in a CUDA graph (" << why
                    << "); its kernels are launched one by one";
    }
  }
  if (graph_ != nullptr) {
    kernels::cuda_graph_launch(graph_, stream_);
  } else {
    enqueue_cuda();
    ++eager_steps_;
  }
  kernels::cuda_stream_synchronize(stream_);
  kernels::cuda_copy_to_host(host_logits_.data(), logits_.data(),
                             host_logits_.size() * sizeof(float));
}

void GptDecoder::enqueue_cuda() {
  const int D = dim_;
  const size_t d = static_cast<size_t>(D);
  float* mean = stats_.data();
  float* rstd = stats_.data() + 1;
  kernels::decode_embedding_cuda(at_.data(), wte_, wpe_, x_.data(), D, stream_);
  for (Block& b : blocks_) {
    kernels::layernorm_forward_cuda({1, D}, x_.data(), b.ln1_w, b.ln1_b, h_.data(), mean, rstd,
                                    stream_);
    kernels::dense_forward_cuda({1, D, 3 * D}, h_.data(), b.qkv_w, b.qkv_b, qkv_.data(), stream_);
    kernels::decode_store_kv_cuda(at_.data(), qkv_.data(), b.keys.data(), b.values.data(), D,
                                  stream_);
    kernels::decode_attention_cuda(qkv_.data(), b.keys.data(), b.values.data(), at_.data(), ctx_, D,
                                   heads_, att_.data(), stream_);
    kernels::dense_forward_cuda({1, D, D}, att_.data(), b.proj_w, b.proj_b, tmp_.data(), stream_);
    kernels::residual_accumulate_cuda(tmp_.data(), x_.data(), d, stream_);
    kernels::layernorm_forward_cuda({1, D}, x_.data(), b.ln2_w, b.ln2_b, h_.data(), mean, rstd,
                                    stream_);
    kernels::dense_forward_cuda({1, D, 4 * D}, h_.data(), b.fc_w, b.fc_b, hidden_.data(), stream_);
    kernels::gelu_forward_cuda(hidden_.data(), act_.data(), 4 * d, stream_);
    kernels::dense_forward_cuda({1, 4 * D, D}, act_.data(), b.mproj_w, b.mproj_b, tmp_.data(),
                                stream_);
    kernels::residual_accumulate_cuda(tmp_.data(), x_.data(), d, stream_);
  }
  kernels::layernorm_forward_cuda({1, D}, x_.data(), lnf_w_, lnf_b_, h_.data(), mean, rstd,
                                  stream_);
  // Tied head: logits [1, V] = ln(x) [1, D] wte^T.
  kernels::GemmShape g;
  g.m = 1;
  g.n = vocab_;
  g.k = D;
  g.trans_b = true;
  kernels::gemm_cuda(g, h_.data(), wte_, logits_.data(), stream_);
}

}  // namespace lockstep
