// The GPT language model (runtime/model/layers/gpt.h) as a user meets it: the gpt preset expands to
// the documented stack with the documented tensor names, bad specs are refused in words, its
// gradient (the tied embedding included, which gets terms from both ends) matches finite
// differences of the per-token loss, oneDNN and OpenBLAS agree, each sample's logits depend only on
// its own tokens, and only on the tokens at or before each position (causality).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <random>

#include "kernels/onednn/onednn.h"
#include "kernels/step/loss.h"
#include "runtime/base/error.h"
#include "runtime/model/gpt_decoder.h"
#include "runtime/model/model.h"
#include "test_util.h"

using namespace lockstep;
using lockstep::testing_util::usage_message;

namespace {

constexpr int kVocab = 11, kSeq = 5, kBatch = 3;
const char* kSpec = "gpt:layers=2,heads=2,dim=8,ctx=6";
// Heads 16 wide: the best CPU kernels take the flash-style attention (attention_flash_cpu.h).
const char* kFlashSpec = "gpt:layers=2,heads=2,dim=32,ctx=6";

std::vector<float> random_tokens(size_t n, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::vector<float> v(n);
  for (float& t : v) t = static_cast<float>(gen() % kVocab);
  return v;
}

std::vector<int32_t> random_targets(size_t n, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::vector<int32_t> v(n);
  for (int32_t& t : v) t = static_cast<int32_t>(gen() % kVocab);
  return v;
}

std::unique_ptr<Model> make(CpuKernels k = CpuKernels::openblas, int batch = kBatch,
                            const char* spec = kSpec) {
  auto m = std::make_unique<Model>(parse_model_spec(spec), SampleShape{kSeq}, kVocab, batch,
                                   ModelPlacement{.cpu_kernels = k}, kSeq);
  m->init_params(7);
  return m;
}

// The mean per-token cross-entropy; with grads, also its gradient in the model.
double mean_loss(Model& m, const std::vector<float>& x, const std::vector<int32_t>& y, bool grads) {
  const int rows = kBatch * kSeq;
  const float* out = m.forward(x.data(), kBatch);
  const auto r = kernels::softmax_cross_entropy_cpu(out, y.data(), nullptr, rows, kVocab,
                                                    1.0f / rows, grads ? m.output_grad() : nullptr);
  if (grads) m.backward(kBatch);
  return r.loss_sum / rows;
}

}  // namespace

TEST(GptModel, PresetExpandsToTheDocumentedStack) {
  EXPECT_EQ("embed:128:128,block:4,block:4,block:4,block:4,lmhead",
            to_string(parse_model_spec("gpt")));
  EXPECT_EQ(to_string(parse_model_spec("gpt")), to_string(parse_model_spec("gpt:tiny")));
  const ModelSpec small = parse_model_spec("gpt:small");
  EXPECT_EQ(14u, small.layers.size());
  EXPECT_EQ("embed:768:1024", to_string(small.layers[0]));
  EXPECT_EQ("block:12", to_string(small.layers[1]));
  EXPECT_EQ("embed:64:32,block:2,lmhead",
            to_string(parse_model_spec("gpt:small,layers=1,heads=2,dim=64,ctx=32")));
  // The stack written out is the same model.
  EXPECT_EQ(parse_model_spec(kSpec).layers,
            parse_model_spec("embed:8:6,block:2,block:2,lmhead").layers);
  // vocab= pins the vocabulary in the embedding (GPT-2's own shape: 50,304 tokens).
  EXPECT_EQ("embed:768:1024:50304", to_string(parse_model_spec("gpt:small,vocab=50304").layers[0]));
}

// A vocabulary in the spec gives the embedding (and the tied head) that many rows when the data
// has as many classes, and is refused in words when it has not.
TEST(GptModel, VocabularyInTheSpecMustBeTheDatas) {
  const ModelSpec spec = parse_model_spec("gpt:layers=1,heads=2,dim=8,ctx=6,vocab=300");
  const std::vector<LayerPlan> plan = plan_model(spec, {6}, 300, 6);
  EXPECT_EQ(300, plan.back().out[1]);
  EXPECT_EQ((300u + 6u) * 8u, plan.front().params);
  EXPECT_NE(std::string::npos, usage_message([&] {
                                 plan_model(spec, {6}, 256, 6);
                               }).find("vocabulary of 300 tokens is not the data's 256"));
}

TEST(GptModel, BadSpecsAreRefusedInWords) {
  EXPECT_NE(std::string::npos, usage_message([] {
                                 parse_model_spec("gpt:heads=3,dim=8");
                               }).find("heads do not divide"));
  EXPECT_NE(std::string::npos,
            usage_message([] { parse_model_spec("gpt:depth=3"); }).find("'depth=3'"));
  EXPECT_NE(std::string::npos,
            usage_message([] { parse_model_spec("gpt:layers=0"); }).find("positive integer"));
  // Sequences longer than the context.
  EXPECT_NE(std::string::npos, usage_message([] {
                                 plan_model(parse_model_spec("gpt:dim=8,heads=2,ctx=4"), {5}, 11,
                                            5);
                               }).find("more than its context of 4"));
  // A head with nothing to tie to, and a model that does not end in per-position outputs.
  EXPECT_NE(std::string::npos, usage_message([] {
                                 plan_model(parse_model_spec("dense:40,lmhead"), {5}, 11, 5);
                               }).find("needs sequences"));
  EXPECT_NE(std::string::npos, usage_message([] {
                                 plan_model(parse_model_spec("embed:8:6,block:2"), {5}, 11, 5);
                               }).find("end a language model with 'lmhead'"));
  EXPECT_NE(std::string::npos, usage_message([] {
                                 plan_model(parse_model_spec("dense,embed:8:6"), {5}, 11, 1);
                               }).find("first layer"));
}

TEST(GptModel, TensorsAreNamedAndTheHeadIsTied) {
  auto owned = make();
  Model& m = *owned;
  const auto t = m.param_tensors();
  ASSERT_EQ(2u + 2 * 12 + 2, t.size());
  EXPECT_EQ("embed0.wte", t[0].name);
  EXPECT_EQ((std::vector<int64_t>{kVocab, 8}), t[0].shape);
  EXPECT_EQ("embed0.wpe", t[1].name);
  EXPECT_EQ("block1.attn.qkv.weight", t[4].name);
  EXPECT_EQ((std::vector<int64_t>{8, 24}), t[4].shape);
  EXPECT_EQ("block2.mlp.proj.bias", t[25].name);
  EXPECT_EQ("lmhead3.ln.weight", t[26].name);
  // No separate output matrix: embeddings, 2 blocks of 12 D^2 + 13 D, the final norm.
  EXPECT_EQ((kVocab + 6) * 8 + 2 * (12 * 64 + 13 * 8) + 16, static_cast<int>(m.trainable_count()));
  EXPECT_EQ(4u, m.param_ranges().size());  // embed, two blocks, lmhead
  EXPECT_EQ(0, m.plan()[3].tied);
  EXPECT_EQ(kSeq * kVocab, m.outputs());
}

TEST(GptModel, BackwardMatchesFiniteDifferences) {
  auto owned = make();
  Model& m = *owned;
  const auto x = random_tokens(kBatch * kSeq, 1);
  const auto y = random_targets(kBatch * kSeq, 2);
  m.zero_grads();
  mean_loss(m, x, y, true);
  const std::vector<float> analytic(m.grads(), m.grads() + m.param_count());
  // In double the step could be small; the model computes in float, so 1e-2 keeps the rounding of
  // the loss (about 1e-7 of it) well below the differences.
  const float eps = 1e-2f;
  for (const ParamTensorInfo& t : m.param_tensors()) {
    double diff = 0, norm = 0;
    for (size_t i = t.offset; i < t.offset + t.count; ++i) {
      const float keep = m.params()[i];
      m.params()[i] = keep + eps;
      const double up = mean_loss(m, x, y, false);
      m.params()[i] = keep - eps;
      const double down = mean_loss(m, x, y, false);
      m.params()[i] = keep;
      const double numeric = (up - down) / (2.0 * eps);
      diff += (numeric - analytic[i]) * (numeric - analytic[i]);
      norm += numeric * numeric;
    }
    ASSERT_GT(norm, 0.0) << t.name;
    EXPECT_LT(std::sqrt(diff / norm), 2e-2) << t.name;
  }
}

// The best CPU kernels (oneDNN's products; the flash-style attention where the heads are 16 wide)
// give the oracle's loss and gradients within rounding.
TEST(GptModel, BestKernelsMatchTheOracle) {
  if (!kernels::onednn_built()) GTEST_SKIP() << "this build has no oneDNN";
  const auto x = random_tokens(kBatch * kSeq, 3);
  const auto y = random_targets(kBatch * kSeq, 4);
  for (const char* spec : {kSpec, kFlashSpec}) {
    SCOPED_TRACE(spec);
    auto pa = make(CpuKernels::openblas, kBatch, spec), pb = make(CpuKernels::best, kBatch, spec);
    Model &a = *pa, &b = *pb;
    a.zero_grads();
    b.zero_grads();
    EXPECT_NEAR(mean_loss(a, x, y, true), mean_loss(b, x, y, true), 1e-5);
    double worst = 0, scale = 0;
    for (size_t i = 0; i < a.param_count(); ++i) {
      worst = std::max(worst, std::abs(static_cast<double>(a.grads()[i]) - b.grads()[i]));
      scale = std::max(scale, std::abs(static_cast<double>(a.grads()[i])));
    }
    EXPECT_LT(worst, 1e-4 * scale);
  }
}

// --recompute: the GELU outputs, or everything a block keeps but its input, computed again in
// the backward pass give the same logits and gradients, bit for bit, as keeping them - on either
// kernel set, with the materialised and the flash attention, at the model's largest batch and a
// smaller one (the shared workspace's regions follow the batch).
TEST(GptModel, RecomputingGivesTheSameBits) {
  const auto x = random_tokens(kBatch * kSeq, 3);
  const auto y = random_targets(kBatch * kSeq, 4);
  std::vector<CpuKernels> sets = {CpuKernels::openblas};
  if (kernels::onednn_built()) sets.push_back(CpuKernels::best);
  for (CpuKernels k : sets)
    for (const char* spec : {kSpec, kFlashSpec})
      for (int batch : {kBatch, kBatch - 1}) {
        std::vector<float> logits[3], grads[3];
        for (Recompute r : {Recompute::none, Recompute::gelu, Recompute::blocks}) {
          SCOPED_TRACE(std::string(spec) + " batch " + std::to_string(batch) + " recompute " +
                       recompute_name(r));
          Model m(parse_model_spec(spec), SampleShape{kSeq}, kVocab, kBatch,
                  ModelPlacement{.cpu_kernels = k, .recompute = r}, kSeq);
          m.init_params(7);
          m.zero_grads();
          const int rows = batch * kSeq;
          const float* out = m.forward(x.data(), batch);
          const int i = static_cast<int>(r);
          logits[i].assign(out, out + static_cast<size_t>(rows) * kVocab);
          kernels::softmax_cross_entropy_cpu(out, y.data(), nullptr, rows, kVocab, 1.0f / rows,
                                             m.output_grad());
          m.backward(batch);
          grads[i].assign(m.grads(), m.grads() + m.param_count());
          if (i == 0) continue;
          EXPECT_EQ(logits[i], logits[0]);
          EXPECT_EQ(grads[i], grads[0]);
        }
        EXPECT_GT(std::count_if(grads[0].begin(), grads[0].end(), [](float g) { return g != 0; }),
                  static_cast<long>(grads[0].size() / 2))
            << "most gradients are non-zero";
      }
}

TEST(GptModel, LogitsDependOnlyOnTheSampleAndTheTokensSoFar) {
  const auto x = random_tokens(kBatch * kSeq, 5);
  auto owned = make();
  Model& m = *owned;
  const float* out = m.forward(x.data(), kBatch);
  const std::vector<float> all(out, out + kBatch * m.outputs());
  // Sample 1 alone gives the logits it had in the batch.
  auto one = make(CpuKernels::openblas, 1);
  const float* alone = one->forward(x.data() + kSeq, 1);
  for (int i = 0; i < m.outputs(); ++i) EXPECT_NEAR(all[m.outputs() + i], alone[i], 1e-5) << i;
  // Changing sample 0's token at position 3 leaves its logits at positions 0-2 as they were, and
  // changes those at 3.
  auto changed = x;
  changed[3] = static_cast<float>((static_cast<int>(changed[3]) + 1) % kVocab);
  const float* after = m.forward(changed.data(), kBatch);
  for (int i = 0; i < 3 * kVocab; ++i) EXPECT_EQ(all[i], after[i]) << i;
  double moved = 0;
  for (int i = 3 * kVocab; i < 4 * kVocab; ++i) moved += std::abs(all[i] - after[i]);
  EXPECT_GT(moved, 1e-3);
}

TEST(GptModel, ATokenOutsideTheVocabularyIsRefused) {
  auto owned = make();
  Model& m = *owned;
  auto x = random_tokens(kBatch * kSeq, 6);
  x[7] = kVocab;
  EXPECT_THROW(m.forward(x.data(), kBatch), std::out_of_range);
  x[7] = 2.5f;
  EXPECT_THROW(m.forward(x.data(), kBatch), std::out_of_range);
}

// The key/value-cache decoder (generation) computes the model's logits one position at a time:
// the same values at every position within float rounding, for both kernel sets (the best ones
// with the materialised and the flash-style attention), and it refuses
// a position past the context.
TEST(GptModel, CacheDecoderGivesTheModelsLogitsPositionByPosition) {
  for (const char* spec : {kSpec, kFlashSpec})
    for (CpuKernels k : {CpuKernels::openblas, CpuKernels::best}) {
      SCOPED_TRACE(spec);
      const auto m = make(k, 1, spec);
      // GPT-2's initial weights (0.02) leave the attention nearly uniform: larger ones make every
      // part of the function count.
      std::vector<float> p = m->params_to_host();
      for (float& v : p) v *= 5.0f;
      m->write_params(0, p.data(), p.size());
      const std::vector<float> x = random_tokens(kSeq, 21);
      const float* out = m->forward(x.data(), 1);
      const std::vector<float> want(out, out + static_cast<size_t>(kSeq) * kVocab);
      GptDecoder decoder(*m);
      EXPECT_EQ(6, decoder.context());
      EXPECT_EQ(kVocab, decoder.vocab());
      for (int t = 0; t < kSeq; ++t) {
        const float* got = decoder.step(static_cast<int>(x[t]));
        float scale = 0, diff = 0;
        for (int v = 0; v < kVocab; ++v) {
          scale = std::max(scale, std::abs(want[t * kVocab + v]));
          diff = std::max(diff, std::abs(got[v] - want[t * kVocab + v]));
        }
        EXPECT_LT(diff, 1e-5f * scale) << "position " << t;
      }
      decoder.step(0);  // position 5, the last of the context
      EXPECT_THROW(decoder.step(0), Error);
      decoder.reset();
      EXPECT_EQ(0, decoder.position());
    }
}
