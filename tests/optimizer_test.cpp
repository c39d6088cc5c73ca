// The Optimizer over a model's flat buffer: adamw decays only the ranges it is given (a model's
// matrices, as GPT training does), biases keep their plain Adam update, the other optimizers' L2
// still covers every parameter, and one step counts once however many ranges it updates. Only an
// unsharded device optimizer writes a bf16 copy of the parameters.
#include "kernels/step/optimizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "kernel_reference.h"
#include "runtime/model/model.h"
#include "runtime/model/optimizer.h"

namespace lockstep {
namespace {

using kernel_test::random_floats;

OptimizerConfig adamw(float wd) {
  OptimizerConfig c;
  c.kind = OptimizerKind::adamw;
  c.weight_decay = wd;
  return c;
}

// Three steps of the Optimizer against the whole-buffer kernel run once with decay and once
// without: every element must equal the decayed run inside `ranges` and the undecayed one outside.
void expect_decay_only_in(const ParamRanges& ranges, size_t n) {
  Optimizer opt(adamw(0.1f), n);
  opt.set_decay_ranges(ranges);
  std::vector<float> p = random_floats(n, 1), decayed = p, plain = p;
  std::vector<float> md(n, 0.0f), vd(n, 0.0f), mp(n, 0.0f), vp(n, 0.0f);
  for (int t = 1; t <= 3; ++t) {
    const std::vector<float> g = random_floats(n, 10 + t, -1.0f, 1.0f);
    opt.step(p.data(), g.data(), 0.01f);
    kernels::AdamOptions o{.lr = 0.01f, .weight_decay = 0.1f, .decoupled = true, .step = t};
    kernels::adam_update_cpu(o, decayed.data(), g.data(), md.data(), vd.data(), n);
    o.weight_decay = 0.0f;
    kernels::adam_update_cpu(o, plain.data(), g.data(), mp.data(), vp.data(), n);
  }
  EXPECT_EQ(opt.steps(), 3);
  std::vector<bool> in(n, false);
  for (const auto& [offset, count] : ranges)
    for (size_t i = offset; i < offset + count; ++i) in[i] = true;
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(p[i], in[i] ? decayed[i] : plain[i])
        << "element " << i << (in[i] ? " (decayed)" : "");
    ASSERT_NE(decayed[i], plain[i]) << "element " << i << ": decay made no difference";
  }
}

// A sharded optimizer (ZeRO): its state's segments update the flat buffers' blocks in place, or,
// with compact_grads and compact_params (a bf16 all-gather's fp32 masters), buffers laid out as the
// state: the same values either way, and nothing outside the segments moves.
TEST(OptimizerSegments, CompactBuffersGetTheUpdatesOfTheFlatBlocks) {
  const size_t flat = 12;
  // State [0, 3) is flat [7, 10); state [3, 7) is flat [1, 5); flat 0, 5, 6, 10, 11 belong to
  // other ranks.
  const std::vector<Optimizer::Segment> segments = {{7, 0, 3}, {1, 3, 4}};
  Optimizer in_place(adamw(0.1f), 7), compact(adamw(0.1f), 7);
  in_place.set_segments(segments);
  compact.set_segments(segments, /*compact_grads=*/true, /*compact_params=*/true);
  const ParamRanges decay = {{2, 3}};  // the state's offsets: part of both segments
  in_place.set_decay_ranges(decay);
  compact.set_decay_ranges(decay);
  std::vector<float> p = random_floats(flat, 3), before = p;
  auto gather = [&](const std::vector<float>& whole) {
    std::vector<float> out;
    for (const Optimizer::Segment& s : segments)
      out.insert(out.end(), whole.begin() + static_cast<ptrdiff_t>(s.flat),
                 whole.begin() + static_cast<ptrdiff_t>(s.flat + s.count));
    return out;
  };
  std::vector<float> masters = gather(p);
  for (int t = 1; t <= 3; ++t) {
    const std::vector<float> g = random_floats(flat, 20 + t, -1.0f, 1.0f);
    in_place.step(p.data(), g.data(), 0.01f);
    compact.step(masters.data(), gather(g).data(), 0.01f);
  }
  EXPECT_EQ(gather(p), masters);
  for (size_t i : {0, 5, 6, 10, 11}) EXPECT_EQ(p[i], before[i]) << "element " << i << " moved";
  EXPECT_NE(gather(p), gather(before));
}

// A bf16 run's one weight copy (Model::params16) is written by an unsharded device optimizer only:
// a host optimizer, or a sharded one (ZeRO, whose other blocks arrive by all-gather), refuses it,
// in either order. Plain SGD allocates nothing on the device, so this runs without a GPU.
TEST(OptimizerParams16, OnlyAnUnshardedDeviceOptimizerTakesTheBf16Copy) {
  OptimizerConfig sgd;
  sgd.kind = OptimizerKind::sgd;
  uint16_t words[8] = {};
  Optimizer on_device(sgd, 8, DeviceKind::cuda);
  EXPECT_NO_THROW(on_device.set_params16(words));
  EXPECT_THROW(on_device.set_segments({{0, 0, 4}, {4, 4, 4}}), std::logic_error);
  on_device.set_params16(nullptr);
  on_device.set_segments({{0, 0, 4}, {4, 4, 4}});
  EXPECT_THROW(on_device.set_params16(words), std::logic_error) << "sharded";
  EXPECT_NO_THROW(on_device.set_params16(nullptr));
  Optimizer on_host(sgd, 8);
  EXPECT_THROW(on_host.set_params16(words), std::logic_error) << "on the host";
}

TEST(OptimizerDecay, AdamwDecaysOnlyTheGivenRanges) {
  expect_decay_only_in({{3, 10}, {40, 7}}, 64);
}

TEST(OptimizerDecay, RangesMayOverlapTouchAndComeInAnyOrder) {
  expect_decay_only_in({{50, 14}, {0, 5}, {5, 3}, {20, 10}, {25, 10}}, 64);
}

TEST(OptimizerDecay, WithoutRangesEverythingDecays) {
  Optimizer opt(adamw(0.5f), 8);
  std::vector<float> p(8, 2.0f), g(8, 0.0f);
  opt.step(p.data(), g.data(), 0.1f);  // zero gradient: only the decay moves p
  for (float x : p) EXPECT_FLOAT_EQ(x, 2.0f * (1.0f - 0.1f * 0.5f));
}

TEST(OptimizerDecay, RangePastTheBufferThrows) {
  Optimizer opt(adamw(0.1f), 8);
  EXPECT_THROW(opt.set_decay_ranges({{4, 5}}), std::invalid_argument);
}

TEST(OptimizerDecay, SgdAndAdamL2CoversEveryParameter) {
  for (OptimizerKind kind : {OptimizerKind::sgd, OptimizerKind::adam}) {
    OptimizerConfig c;
    c.kind = kind;
    c.weight_decay = 0.5f;
    Optimizer opt(c, 4);
    opt.set_decay_ranges({{0, 1}});
    std::vector<float> p(4, 2.0f), g(4, 0.0f);
    opt.step(p.data(), g.data(), 0.1f);
    for (float x : p) EXPECT_EQ(x, p[0]) << optimizer_name(kind) << ": L2 must reach every element";
    EXPECT_LT(p[3], 2.0f) << optimizer_name(kind);
  }
}

// What the trainer passes: a model's weights (rank 2 and 4) decay, its biases do not.
TEST(OptimizerDecay, ModelWeightsDecayBiasesDoNot) {
  Model m(parse_model_spec("conv3x3:3,relu,flatten,dense:5,relu,dense"), {6, 6, 2}, 3, 2);
  m.init_params(7);
  const auto tensors = m.param_tensors();
  Optimizer opt(adamw(0.5f), m.param_count());
  opt.set_decay_ranges(matrix_ranges(tensors));
  std::vector<float> p(m.params(), m.params() + m.param_count());
  for (const ParamTensorInfo& t : tensors)  // biases start at zero: give them a value to decay
    if (t.shape.size() == 1) std::fill_n(p.begin() + t.offset, t.count, 1.0f);
  const std::vector<float> before = p, g(p.size(), 0.0f);
  opt.step(p.data(), g.data(), 0.1f);
  int weights = 0, biases = 0;
  for (const ParamTensorInfo& t : tensors) {
    const bool matrix = t.shape.size() >= 2;
    (matrix ? weights : biases) += 1;
    for (size_t i = t.offset; i < t.offset + t.count; ++i) {
      const float want = matrix ? before[i] * (1.0f - 0.1f * 0.5f) : before[i];
      ASSERT_FLOAT_EQ(p[i], want) << t.name << (matrix ? " should decay" : " should not decay");
    }
  }
  EXPECT_EQ(weights, 3);
  EXPECT_EQ(biases, 3);
}

}  // namespace
}  // namespace lockstep
