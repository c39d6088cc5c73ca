// Lanes (kernels/step/thread_lanes.h, ModelPlacement::lanes): a rank's threads each running the
// model over their own rows. What a user would notice if they were wrong: a model run in lanes
// gives the outputs and gradients of the same model run whole (within the rounding of adding the
// lanes' gradients), the same bits every time, gradients complete when the trainer is told a layer
// is done (the reductions start from there), micro-batches that add up, and a failure in any lane
// that comes back as an error instead of a hang or a crash.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "kernels/onednn/onednn.h"
#include "kernels/step/thread_lanes.h"
#include "runtime/model/model.h"

using namespace lockstep;

namespace {

// Three threads for the lanes whatever the machine (two cores in CI: they take turns).
class Lanes : public testing::Test {
 protected:
  void SetUp() override {
    threads_ = kernels::lane_threads();
    kernels::onednn_set_threads(3);
    set_ = kernels::lane_threads();  // 3, or 1 in a build without oneDNN (no OpenMP team)
  }
  void TearDown() override { kernels::onednn_set_threads(threads_); }
  int threads_ = 1, set_ = 1;
};

std::vector<float> random_vector(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

TEST_F(Lanes, EveryRoundRunsInOrderAndTheSerialPartOnTheCallingThread) {
  const int lanes = 3, rounds = 4;
  const std::thread::id caller = std::this_thread::get_id();
  std::mutex mutex;
  std::vector<std::set<int>> worked(rounds), parts(rounds);
  std::vector<int> serial;
  std::atomic<bool> lane0_elsewhere{false}, serial_elsewhere{false}, early{false};
  kernels::run_lanes(
      lanes, rounds,
      [&](int lane, int round) {
        if (lane == 0 && std::this_thread::get_id() != caller) lane0_elsewhere = true;
        std::lock_guard<std::mutex> lock(mutex);
        // Round r's work never starts before round r - 1's shared part is done.
        if (round > 0 && parts[round - 1].empty()) early = true;
        worked[round].insert(lane);
      },
      [&](int round, int part, int count) {
        std::lock_guard<std::mutex> lock(mutex);
        if (worked[round].size() != static_cast<size_t>(lanes)) early = true;
        EXPECT_GE(part, 0);
        EXPECT_LT(part, count);
        parts[round].insert(part);
      },
      [&](int round) {
        if (std::this_thread::get_id() != caller) serial_elsewhere = true;
        serial.push_back(round);
      });
  for (int r = 0; r < rounds; ++r) {
    EXPECT_EQ(worked[r].size(), static_cast<size_t>(lanes)) << "round " << r;
    EXPECT_FALSE(parts[r].empty()) << "round " << r;
    EXPECT_EQ(*parts[r].rbegin() + 1, static_cast<int>(parts[r].size())) << "parts 0 .. n - 1";
  }
  EXPECT_EQ(serial, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_FALSE(lane0_elsewhere) << "lane 0 runs on the calling thread";
  EXPECT_FALSE(serial_elsewhere) << "the serial part runs on the calling thread";
  EXPECT_FALSE(early) << "a round's shared part waits for every lane's work";
  EXPECT_EQ(set_, kernels::lane_threads()) << "the caller's thread count changed";
}

TEST_F(Lanes, AFailingLaneIsRethrownAndStopsWhatFollows) {
  std::atomic<int> after{0};
  try {
    // (A shared part makes each round wait for the last: without one the lanes go on alone.)
    kernels::run_lanes(
        3, 5,
        [&](int lane, int round) {
          if (round > 1) after += 1;
          if (lane == 1 && round == 1) throw std::runtime_error("lane 1 failed");
        },
        [](int, int, int) {});
    ADD_FAILURE() << "the failure was not rethrown";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "lane 1 failed");
  }
  EXPECT_EQ(after.load(), 0) << "rounds after the failing one ran";
  // A failure in the serial part stops the rounds after it too.
  int rounds_run = 0;
  EXPECT_THROW(kernels::run_lanes(
                   2, 4, [&](int lane, int) { rounds_run += lane == 0; }, nullptr,
                   [&](int round) {
                     if (round == 0) throw std::logic_error("serial failed");
                   }),
               std::logic_error);
  EXPECT_LE(rounds_run, 2) << "lane 0 went on past the round after the failure";
}

// One forward and backward pass of `m` over x with the loss sum(y^2)/2 (dLoss/dy = y), into
// `out` and `grads`; layer_done's calls are checked against the final gradients.
void pass(Model& m, const std::vector<float>& x, int batch, std::vector<float>& out,
          std::vector<float>& grads, std::vector<int>* done_order = nullptr,
          std::vector<std::vector<float>>* at_done = nullptr) {
  const float* y = m.forward(x.data(), batch);
  out.assign(y, y + static_cast<size_t>(batch) * m.outputs());
  std::copy(out.begin(), out.end(), m.output_grad());
  m.zero_grads();
  m.backward(batch, [&](int layer) {
    if (done_order) done_order->push_back(layer);
    if (!at_done) return;
    // This layer's range as it stands when the trainer is told the layer is done.
    for (const ParamRange& r : m.param_ranges())
      if (r.layer == layer)
        (*at_done)[layer].assign(m.grads() + r.offset, m.grads() + r.offset + r.count);
  });
  grads.assign(m.grads(), m.grads() + m.param_count());
}

struct Case {
  const char* spec;
  SampleShape input;
  int outputs, positions, batch;
  bool tokens;
};

// The Fashion-MNIST CNN (fused convolution + pool, blocked activations on AVX-512, Winograd), a
// CNN whose convolutions are all oneDNN's (8 channels: a weight gradient that waits at a barrier
// for the threads it was planned for, and hung when it was planned for two inside a lane), and a
// GPT whose head is tied to its embedding (flash attention: heads 16 wide).
const Case kCases[] = {{"gpt:layers=2,heads=2,dim=32,ctx=8", {8}, 13, 8, 7, true},
                       {"cnn", {28, 28, 1}, 10, 1, 12, false},
                       {"conv3x3:8,relu,maxpool2,conv3x3:8,relu,flatten,dense:16,relu,dense",
                        {12, 12, 3},
                        5,
                        1,
                        10,
                        false}};

std::unique_ptr<Model> make(const Case& c, int lanes, CpuKernels k = CpuKernels::best) {
  auto m = std::make_unique<Model>(parse_model_spec(c.spec), c.input, c.outputs, c.batch,
                                   ModelPlacement{.cpu_kernels = k, .lanes = lanes}, c.positions);
  m->init_params(5);
  return m;
}

std::vector<float> input_of(const Case& c, const Model& m, int batch) {
  std::vector<float> x = random_vector(static_cast<size_t>(batch) * m.input_size(), 11);
  if (c.tokens)
    for (float& t : x) t = std::floor((t + 1.0f) * 0.5f * static_cast<float>(c.outputs - 1));
  return x;
}

void expect_near(const std::vector<float>& a, const std::vector<float>& b, float tol,
                 const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  float scale = 0;
  for (float v : b) scale = std::max(scale, std::fabs(v));
  for (size_t j = 0; j < a.size(); ++j)
    ASSERT_NEAR(a[j], b[j], tol * (1.0f + scale)) << what << " " << j;
}

TEST_F(Lanes, AModelInLanesGivesTheWholeModelsOutputsAndGradients) {
  if (!kernels::onednn_built()) GTEST_SKIP() << "this build has no oneDNN: no lanes (model.h)";
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.spec);
    auto whole = make(c, 1);
    ASSERT_EQ(1, whole->lanes());
    std::vector<float> out1, grads1;
    for (int batch : {c.batch, c.batch - 2}) {
      SCOPED_TRACE("batch " + std::to_string(batch));
      pass(*whole, input_of(c, *whole, batch), batch, out1, grads1);
      for (int lanes : {2, 3}) {
        SCOPED_TRACE(std::to_string(lanes) + " lanes");
        auto m = make(c, lanes);
        ASSERT_EQ(lanes, m->lanes());
        std::vector<float> out, grads, out_again, grads_again;
        std::vector<int> order;
        std::vector<std::vector<float>> at_done(m->plan().size());
        pass(*m, input_of(c, *m, batch), batch, out, grads, &order, &at_done);
        expect_near(out, out1, 1e-5f, "output");
        expect_near(grads, grads1, 1e-5f, "gradient");
        EXPECT_GT(std::count_if(grads.begin(), grads.end(), [](float g) { return g != 0; }),
                  static_cast<long>(m->trainable_count() / 2))
            << "most gradients are non-zero";
        // Each layer that computes is reported once, last first, its gradients then final.
        EXPECT_TRUE(std::is_sorted(order.rbegin(), order.rend()));
        EXPECT_EQ(std::set<int>(order.begin(), order.end()).size(), order.size());
        for (const ParamRange& r : m->param_ranges()) {
          ASSERT_FALSE(at_done[r.layer].empty()) << "layer " << r.layer << " was not reported";
          EXPECT_TRUE(std::equal(at_done[r.layer].begin(), at_done[r.layer].end(),
                                 grads.begin() + static_cast<long>(r.offset)))
              << "layer " << r.layer << "'s gradients changed after it was reported done";
        }
        // The same bits every time.
        pass(*m, input_of(c, *m, batch), batch, out_again, grads_again);
        EXPECT_EQ(out, out_again);
        EXPECT_EQ(grads, grads_again);
      }
    }
  }
}

TEST_F(Lanes, MicroBatchesAddUpAndSmallBatchesTakeFewerLanes) {
  if (!kernels::onednn_built()) GTEST_SKIP() << "this build has no oneDNN: no lanes (model.h)";
  const Case& c = kCases[0];
  auto m = make(c, 3);
  const int batch = c.batch;
  const std::vector<float> x = input_of(c, *m, batch);
  std::vector<float> out, whole;
  pass(*m, x, batch, out, whole);
  // The same rows as two micro-batches, the gradients accumulated: 1 row (one lane) and the rest.
  m->zero_grads();
  const size_t row = m->input_size();
  for (auto [first, rows] : {std::pair<int, int>{0, 1}, {1, batch - 1}}) {
    const float* y = m->forward(x.data() + first * row, rows);
    std::copy(y, y + static_cast<size_t>(rows) * m->outputs(), m->output_grad());
    m->backward(rows);
  }
  std::vector<float> parts(m->grads(), m->grads() + m->param_count());
  expect_near(parts, whole, 1e-5f, "accumulated gradient");
}

TEST_F(Lanes, AllLanesOrNoneAndNoneWithOpenBlas) {
  const Case& c = kCases[0];
  EXPECT_EQ(1, make(c, 4, CpuKernels::openblas)->lanes());
  if (!kernels::onednn_built()) GTEST_SKIP() << "this build has no oneDNN: no lanes (model.h)";
  EXPECT_EQ(1, make(c, c.batch + 1)->lanes()) << "more lanes than rows: a thread would idle";
  EXPECT_EQ(c.batch, make(c, c.batch)->lanes());
  EXPECT_EQ(1, make(c, 0)->lanes());
}

}  // namespace
