// Training on a token split (a language model's data) end to end on one rank: a registered test
// layer maps T token ids to (T, V) logits (a bigram table, V x V, starting at zero); the trainer
// then reaches exactly the parameters of a hand-written per-token reference (the loss scale is
// 1/(valid rows * T), a padding row's positions count nothing, gradient accumulation is exact),
// learns the file's next-token rule, and reports the loss per token with bits per byte.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "data_fixtures.h"
#include "runtime/model/layer_registry.h"
#include "runtime/train/trainer.h"
#include "solo_communicator.h"
#include "test_util.h"

using namespace lockstep;
using namespace lockstep::testing_util;

namespace {

constexpr int kVocab = 256, kT = 6;

// "test_bigram": logits[t] = W[token t], W (V, V). CPU only; the first layer (no dx).
class BigramLayer : public Layer {
 public:
  using Layer::Layer;
  void forward(int batch, const float* x, float* y, float*) override {
    const size_t T = in_size(), V = out_size() / T;
    for (size_t i = 0; i < static_cast<size_t>(batch) * T; ++i) {
      const auto tok = static_cast<size_t>(std::lround(x[i]));
      std::copy_n(params_ + tok * V, V, y + i * V);
    }
  }
  void backward(int batch, const float* x, const float*, const float* dy, float* dx,
                float*) override {
    const size_t T = in_size(), V = out_size() / T;
    for (size_t i = 0; i < static_cast<size_t>(batch) * T; ++i) {
      const auto tok = static_cast<size_t>(std::lround(x[i]));
      for (size_t v = 0; v < V; ++v) grads_[tok * V + v] += dy[i * V + v];
      if (dx) dx[i] = 0;
    }
  }
};

void register_bigram() {
  static std::once_flag once;
  std::call_once(once, [] {
    LayerType t;
    t.name = t.syntax = "test_bigram";
    t.parse = [](const LayerToken& tok) {
      tok.expect_args(0, 0);
      return std::vector<int>{};
    };
    t.format = [](const LayerSpec&) { return std::string("test_bigram"); };
    t.plan = [](LayerPlan& p, const LayerCheck& check) {
      p.out = {p.in[0], check.outputs};
      p.params = static_cast<size_t>(check.outputs) * static_cast<size_t>(check.outputs);
    };
    t.init = [](const LayerPlan& p, float* host, std::mt19937_64&) {
      std::fill(host, host + p.params, 0.0f);
    };
    t.tensors = [](const LayerPlan& p) {
      return std::vector<LayerTensor>{{"weight", {static_cast<int64_t>(p.params)}}};
    };
    t.make_cpu = [](const LayerPlan& p, CpuKernels) -> std::unique_ptr<Layer> {
      return std::make_unique<BigramLayer>(p);
    };
    register_layer(t);
  });
}

class TokenTrainer : public ::testing::Test {
 protected:
  void SetUp() override { register_bigram(); }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // train/ of `rows` and test/ of 4 rows; token k of row r is token_value(r, k): the next token is
  // always the current one + 3 (mod 256).
  std::string data(int64_t rows) {
    const std::string path = dir_ + "/t" + std::to_string(rows) + ".h5";
    write_tokens<uint8_t>(path, rows, kT, kVocab, "train");
    write_tokens<uint8_t>(path, 4, kT, kVocab, "test");
    return path;
  }
  TrainConfig config(const std::string& path) const {
    TrainConfig c;
    c.train.path = path;
    c.model = "test_bigram";
    c.optimizer.kind = OptimizerKind::sgd;
    c.lr = 50;
    c.shuffle = false;
    c.print = false;
    c.eval_every_epoch = false;
    return c;
  }
  std::string dir_ = local_temp_dir("token_trainer");
};

// One SGD step of the mean per-token cross-entropy over rows [first, first + n) of train/, in
// double: W -= lr / (n T) * sum over positions of (softmax(W[tok]) - onehot(next)).
void reference_step(std::vector<double>& w, int64_t first, int64_t n, double lr) {
  std::vector<double> g(w.size(), 0.0), p(kVocab);
  for (int64_t r = first; r < first + n; ++r)
    for (int k = 0; k < kT; ++k) {
      const auto tok = static_cast<size_t>(token_value(r, k, kVocab));
      const auto next = static_cast<size_t>(token_value(r, k + 1, kVocab));
      const double* row = &w[tok * kVocab];
      double mx = row[0], sum = 0;
      for (int v = 1; v < kVocab; ++v) mx = std::max(mx, row[v]);
      for (int v = 0; v < kVocab; ++v) sum += p[v] = std::exp(row[v] - mx);
      for (int v = 0; v < kVocab; ++v)
        g[tok * kVocab + v] += p[v] / sum - (static_cast<size_t>(v) == next ? 1.0 : 0.0);
    }
  for (size_t i = 0; i < w.size(); ++i) w[i] -= lr / static_cast<double>(n * kT) * g[i];
}

// 10 rows, global batch 8 in two micro-batches of 4: step 1 holds rows 0-7, step 2 rows 8-9 and
// two padding rows (mask 0) in its only micro-batch.
TEST_F(TokenTrainer, StepsAreThoseOfTheMeanPerTokenLoss) {
  TrainConfig c = config(data(10));
  c.global_batch = 8;
  c.grad_accum = 2;
  c.epochs = 1;
  SoloCommunicator comm;
  Trainer trainer(comm, comm, c);
  EXPECT_EQ(trainer.train_info().positions, kT);
  EXPECT_EQ(trainer.model().positions(), kT);
  const TrainResult r = trainer.run();
  std::vector<double> want(static_cast<size_t>(kVocab) * kVocab, 0.0);
  reference_step(want, 0, 8, c.lr);
  reference_step(want, 8, 2, c.lr);
  const std::vector<float> got = trainer.model().params_to_host();
  ASSERT_EQ(got.size(), want.size());
  double worst = 0, largest = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    worst = std::max(worst, std::fabs(got[i] - want[i]));
    largest = std::max(largest, std::fabs(want[i]));
  }
  EXPECT_GT(largest, 1.0) << "the steps moved the table";
  EXPECT_LT(worst, 1e-4 * largest);
  EXPECT_EQ(r.test.samples, 4) << "test rows, not tokens";

  // Without the evaluation at the end (lockstep-bench's runs), the same steps and no test figures.
  c.eval_at_end = false;
  Trainer quiet(comm, comm, c);
  const TrainResult q = quiet.run();
  EXPECT_EQ(q.test.samples, 0) << "evaluated at the end regardless";
  EXPECT_EQ(quiet.model().params_to_host(), got);
}

TEST_F(TokenTrainer, LearnsTheNextTokenAndReportsBitsPerByte) {
  TrainConfig c = config(data(48));
  c.global_batch = 16;
  c.epochs = 3;
  c.log_every = 1;
  c.eval_every_epoch = true;
  c.print = true;
  c.metrics_path = dir_ + "/metrics.jsonl";
  c.lr = 400;
  SoloCommunicator comm;
  Trainer trainer(comm, comm, c);
  const TrainResult r = trainer.run();
  EXPECT_LT(r.test.loss, 0.5) << "started at ln 256 = 5.55 per token";
  EXPECT_GT(r.test.accuracy, 0.99);

  std::ifstream in(c.metrics_path);
  int train_lines = 0, eval_lines = 0;
  auto value = [](const std::string& line, const std::string& key) {
    const size_t at = line.find("\"" + key + "\":");
    EXPECT_NE(at, std::string::npos) << key << " missing from " << line;
    return at == std::string::npos ? -1.0 : std::stod(line.substr(at + key.size() + 3));
  };
  for (std::string line; std::getline(in, line);) {
    if (line.find("\"kind\":\"train\"") != std::string::npos) {
      ++train_lines;
      EXPECT_NEAR(value(line, "bits_per_byte"), value(line, "loss") / std::log(2.0), 1e-6);
    } else if (line.find("\"kind\":\"eval\"") != std::string::npos) {
      ++eval_lines;
      EXPECT_NEAR(value(line, "test_bits_per_byte"), value(line, "test_loss") / std::log(2.0),
                  1e-6);
      EXPECT_NEAR(value(line, "train_bits_per_byte"), value(line, "train_loss") / std::log(2.0),
                  1e-6);
    }
  }
  EXPECT_EQ(train_lines, 9);
  EXPECT_EQ(eval_lines, 3);
}

TEST_F(TokenTrainer, ATestSplitWithAnotherVocabularyIsRefused) {
  const std::string path = dir_ + "/mixed.h5";
  write_tokens<int32_t>(path, 8, kT, 300, "train");
  write_tokens<int32_t>(path, 4, kT, 200, "test");
  TrainConfig c = config(path);
  c.global_batch = 4;
  SoloCommunicator comm;
  try {
    Trainer trainer(comm, comm, c);
    ADD_FAILURE() << "accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("vocab_size is 200"), std::string::npos) << e.what();
  }
}

}  // namespace
