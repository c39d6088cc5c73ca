// GraphRunner's capture failures (runtime/train/graph_step.h), at 1, 2 and 4 CPU ranks with a
// stand-in for the CUDA graphs: a capture that fails on one rank for a reason of its own falls back
// on every rank (the agreed "run without graphs"), while a collective that timed out inside the
// capture, or a gradient communicator that lost a peer, propagates as the error it is: a run that
// went on without graphs there would fail later on a dead communicator, with a misleading message
// (issue 31 part 2 (e)). Nothing here needs a GPU: the runner decides before any launch.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>

#include "runtime/base/communicator.h"
#include "runtime/base/error.h"
#include "runtime/comm/buckets.h"
#include "runtime/observe/step_timer.h"
#include "runtime/train/graph_step.h"
#include "runtime/train/step.h"

namespace lockstep {
namespace {

// StepGraphs without a device: counts what the runner asks of it.
class FakeGraphs : public StepGraphs {
 public:
  void begin() override { ++begun; }
  void share_loss(Communicator&) override {}
  void gradient_norm(const float*, size_t) override {}
  double* norm_slot() override { return nullptr; }
  const double* gate() const override { return nullptr; }
  int gates() const override { return 0; }
  bool applied() const override { return true; }
  std::string end(const void*) override { return ""; }
  void abort() noexcept override { ++aborted; }
  bool ready(const void*) const override { return false; }
  void launch(const void*, const Batch&) override { ++launched; }
  Step::Outcome outcome() override { return {}; }
  void clear() noexcept override { ++cleared; }
  int begun = 0, aborted = 0, launched = 0, cleared = 0;
};

// The MPI communicator under another name, reporting a lost peer.
class LostPeer : public Communicator {
 public:
  explicit LostPeer(Communicator& inner) : inner_(inner) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  Backend backend() const override { return inner_.backend(); }
  WorkHandle all_reduce_async(const void* s, void* r, size_t n, DType t, ReduceOp op) override {
    return inner_.all_reduce_async(s, r, n, t, op);
  }
  WorkHandle broadcast_async(void* b, size_t n, DType t, int root) override {
    return inner_.broadcast_async(b, n, t, root);
  }
  WorkHandle all_gather_async(const void* s, void* r, size_t n, DType t) override {
    return inner_.all_gather_async(s, r, n, t);
  }
  WorkHandle reduce_scatter_async(const void* s, void* r, size_t n, DType t, ReduceOp op) override {
    return inner_.reduce_scatter_async(s, r, n, t, op);
  }
  WorkHandle barrier_async() override { return inner_.barrier_async(); }
  std::string lost() const override { return "rank 1 stopped answering (test)"; }

 private:
  Communicator& inner_;
};

class GraphRunnerTest : public testing::Test {
 protected:
  // A runner over `grads`, warmed up so that its next full step captures.
  std::unique_ptr<GraphRunner> runner(Communicator& grads) {
    reducer_ = std::make_unique<BucketReducer>(grads, std::vector<Bucket>{});
    auto r = std::make_unique<GraphRunner>(graphs_, nullptr, *host_, grads, *reducer_, timer_,
                                           /*capture_fail_rank=*/-1);
    for (int64_t i = 0; i < GraphRunner::kWarmSteps; ++i) r->ran_eagerly(true);
    EXPECT_TRUE(r->ready(true));
    return r;
  }
  bool capture(GraphRunner& r, const std::function<void()>& record) {
    return r.run(&key_, batch_, record, [] {});
  }

  std::unique_ptr<Communicator> host_ = make_mpi_communicator();
  std::unique_ptr<Communicator> grads_ = make_mpi_communicator();
  FakeGraphs graphs_;
  StepTimes times_;
  StepTimer timer_{times_, PhaseHook{}, nullptr};
  std::unique_ptr<BucketReducer> reducer_;
  Batch batch_;
  int key_ = 0;
};

TEST_F(GraphRunnerTest, ACaptureThatFailsOnOneRankFallsBackOnEvery) {
  auto r = runner(*grads_);
  const int last = host_->size() - 1;
  const bool captured = capture(*r, [&] {
    if (host_->rank() == last) throw Error("cudaStreamBeginCapture: operation not permitted");
  });
  EXPECT_FALSE(captured);
  EXPECT_FALSE(r->ready(true)) << "the graphs are given up";
  EXPECT_EQ(graphs_.launched, 0);
  EXPECT_EQ(graphs_.cleared, 1);
  EXPECT_EQ(graphs_.aborted, host_->rank() == last ? 1 : 0);
}

TEST_F(GraphRunnerTest, ACollectiveThatTimesOutInsideTheCaptureStaysAnError) {
  auto r = runner(*grads_);
  EXPECT_THROW(capture(*r, [] { throw TimeoutError("all_reduce timed out after 60 s (test)"); }),
               TimeoutError);
  EXPECT_EQ(graphs_.aborted, 1) << "the capture is discarded";
  EXPECT_EQ(graphs_.cleared, 0) << "not taken for a capture problem";
  EXPECT_TRUE(r->ready(true)) << "graphs not given up";
}

TEST_F(GraphRunnerTest, ACommunicatorThatLostAPeerStaysAnError) {
  LostPeer lost(*grads_);
  auto r = runner(lost);
  EXPECT_THROW(capture(*r, [] { throw Error("ncclAllReduce: remote process exited (test)"); }),
               Error);
  EXPECT_EQ(graphs_.cleared, 0);
  EXPECT_TRUE(r->ready(true));
}

}  // namespace
}  // namespace lockstep
