#include "runtime/model/gpt_decoder.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "kernels/dense.h"
#include "kernels/gpt/gelu.h"
#include "kernels/gpt/layernorm.h"
#include "runtime/base/error.h"

namespace lockstep {

GptDecoder::GptDecoder(const Model& model) : params_(model.params_to_host()) {
  const std::vector<LayerPlan>& plan = model.plan();
  if (plan.size() < 3 || plan.front().spec.type != "embed" || plan.back().spec.type != "lmhead")
    throw UsageError("the key/value-cache decoder needs a gpt: model (embed, blocks, lmhead)");
  std::map<std::string, const float*> at;
  std::map<std::string, std::vector<int64_t>> shape;
  for (const ParamTensorInfo& t : model.param_tensors()) {
    at[t.name] = params_.data() + t.offset;
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
              std::vector<float>(static_cast<size_t>(ctx_) * dim_),
              std::vector<float>(static_cast<size_t>(ctx_) * dim_)};
    blocks_.push_back(std::move(blk));
  }
  const std::string head = "lmhead" + std::to_string(plan.size() - 1) + ".";
  lnf_w_ = find(head + "ln.weight");
  lnf_b_ = find(head + "ln.bias");
  const size_t d = static_cast<size_t>(dim_);
  x_.resize(d);
  h_.resize(d);
  qkv_.resize(3 * d);
  att_.resize(d);
  tmp_.resize(d);
  hidden_.resize(4 * d);
  act_.resize(4 * d);
  scores_.resize(static_cast<size_t>(ctx_));
  logits_.resize(static_cast<size_t>(vocab_));
}

const float* GptDecoder::step(int token) {
  if (pos_ >= ctx_ || token < 0 || token >= vocab_)
    throw Error("GptDecoder::step: position " + std::to_string(pos_) + " of " +
                std::to_string(ctx_) + ", token " + std::to_string(token));
  const int D = dim_, Dh = dim_ / heads_;
  const size_t d = static_cast<size_t>(D);
  float mean, rstd;
  for (size_t j = 0; j < d; ++j)
    x_[j] = wte_[static_cast<size_t>(token) * d + j] + wpe_[static_cast<size_t>(pos_) * d + j];
  const float scale = 1.0f / std::sqrt(static_cast<float>(Dh));
  for (Block& b : blocks_) {
    kernels::layernorm_forward_cpu({1, D}, x_.data(), b.ln1_w, b.ln1_b, h_.data(), &mean, &rstd);
    kernels::dense_forward_cpu({1, D, 3 * D}, h_.data(), b.qkv_w, b.qkv_b, qkv_.data());
    std::copy_n(qkv_.begin() + D, D, b.keys.begin() + static_cast<ptrdiff_t>(pos_ * d));
    std::copy_n(qkv_.begin() + 2 * D, D, b.values.begin() + static_cast<ptrdiff_t>(pos_ * d));
    for (int h = 0; h < heads_; ++h) {
      const float* q = qkv_.data() + h * Dh;
      float top = -INFINITY;
      for (int t = 0; t <= pos_; ++t) {
        const float* k = b.keys.data() + static_cast<size_t>(t) * d + h * Dh;
        float s = 0.0f;
        for (int j = 0; j < Dh; ++j) s += q[j] * k[j];
        scores_[t] = s * scale;
        top = std::max(top, scores_[t]);
      }
      float sum = 0.0f;
      for (int t = 0; t <= pos_; ++t) sum += (scores_[t] = std::exp(scores_[t] - top));
      float* out = att_.data() + h * Dh;
      std::fill(out, out + Dh, 0.0f);
      for (int t = 0; t <= pos_; ++t) {
        const float p = scores_[t] / sum;
        const float* v = b.values.data() + static_cast<size_t>(t) * d + h * Dh;
        for (int j = 0; j < Dh; ++j) out[j] += p * v[j];
      }
    }
    kernels::dense_forward_cpu({1, D, D}, att_.data(), b.proj_w, b.proj_b, tmp_.data());
    for (size_t j = 0; j < d; ++j) x_[j] += tmp_[j];
    kernels::layernorm_forward_cpu({1, D}, x_.data(), b.ln2_w, b.ln2_b, h_.data(), &mean, &rstd);
    kernels::dense_forward_cpu({1, D, 4 * D}, h_.data(), b.fc_w, b.fc_b, hidden_.data());
    kernels::gelu_forward_cpu(hidden_.data(), act_.data(), 4 * d);
    kernels::dense_forward_cpu({1, 4 * D, D}, act_.data(), b.mproj_w, b.mproj_b, tmp_.data());
    for (size_t j = 0; j < d; ++j) x_[j] += tmp_[j];
  }
  kernels::layernorm_forward_cpu({1, D}, x_.data(), lnf_w_, lnf_b_, h_.data(), &mean, &rstd);
  for (int v = 0; v < vocab_; ++v) {  // tied head: logits = ln(x) wte^T
    const float* w = wte_ + static_cast<size_t>(v) * d;
    float s = 0.0f;
    for (size_t j = 0; j < d; ++j) s += h_[j] * w[j];
    logits_[v] = s;
  }
  ++pos_;
  return logits_.data();
}

}  // namespace lockstep
