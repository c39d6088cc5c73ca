// Gradient buckets: reverse layer order, every gradient element in exactly one bucket, layers
// never split, a layer larger than the bucket size alone, zero-size layers absorbed, bucket size 0
// as a single bucket; and the reducer starts each bucket once its first layer is done, and orders
// a device-buffer communicator after its stream only while it lives.
#include "runtime/comm/buckets.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "runtime/base/error.h"
#include "solo_communicator.h"

using namespace lockstep;

namespace {

constexpr size_t kF = sizeof(float);

// Checks what must hold for any input: buckets in reverse layer order, contiguous and adjacent,
// every element covered once, no empty bucket, layer ranges consistent with the offsets.
void expect_tiling(const std::vector<size_t>& sizes, const std::vector<Bucket>& buckets) {
  size_t total = std::accumulate(sizes.begin(), sizes.end(), size_t{0});
  std::vector<int> hits(total, 0);
  size_t end = total;
  int next_last = static_cast<int>(sizes.size()) - 1;
  for (const Bucket& b : buckets) {
    EXPECT_GT(b.count, 0u);
    EXPECT_EQ(b.offset + b.count, end) << "buckets are not adjacent in reverse order";
    EXPECT_EQ(b.last_layer, next_last);
    EXPECT_LE(b.first_layer, b.last_layer);
    size_t first_offset = std::accumulate(sizes.begin(), sizes.begin() + b.first_layer, size_t{0});
    size_t layer_elems =
        std::accumulate(sizes.begin() + b.first_layer, sizes.begin() + b.last_layer + 1, size_t{0});
    EXPECT_EQ(b.offset, first_offset);
    EXPECT_EQ(b.count, layer_elems) << "a bucket must hold whole layers";
    for (size_t i = b.offset; i < b.offset + b.count && i < total; ++i) hits[i] += 1;
    end = b.offset;
    next_last = b.first_layer - 1;
  }
  if (total > 0) {
    EXPECT_EQ(end, 0u);
    EXPECT_EQ(next_last, -1) << "every layer belongs to a bucket";
  }
  for (size_t i = 0; i < total; ++i) ASSERT_EQ(hits[i], 1) << "element " << i;
}

TEST(Buckets, ReverseOrderGroupsWholeLayersUpToTheSize) {
  // Layers of 100, 50, 50, 30 floats; buckets of 100 floats.
  std::vector<size_t> sizes = {100, 50, 50, 30};
  auto b = assign_buckets(sizes, 100 * kF);
  expect_tiling(sizes, b);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0].first_layer, 2);  // 30 + 50 fit; another 50 would not
  EXPECT_EQ(b[0].count, 80u);
  EXPECT_EQ(b[1].first_layer, 1);  // 50, and 50 + 100 would not fit
  EXPECT_EQ(b[1].count, 50u);
  EXPECT_EQ(b[2].first_layer, 0);
  EXPECT_EQ(b[2].count, 100u);
  EXPECT_EQ(b[2].offset, 0u);
  for (const Bucket& k : b) EXPECT_LE(k.count * kF, 100 * kF);
}

TEST(Buckets, HugeLayerGetsItsOwnBucket) {
  std::vector<size_t> sizes = {10, 5000, 10, 10};
  auto b = assign_buckets(sizes, 64 * kF);
  expect_tiling(sizes, b);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0].count, 20u);
  EXPECT_EQ(b[1].first_layer, 1);
  EXPECT_EQ(b[1].last_layer, 1);
  EXPECT_EQ(b[1].count, 5000u);
  EXPECT_EQ(b[2].count, 10u);
}

TEST(Buckets, ZeroSizeLayersNeverMakeABucket) {
  // A CNN's shape: conv, relu, pool, conv, relu, flatten, dense, relu (no params in 1, 2, 4, 5, 7).
  std::vector<size_t> sizes = {0, 320, 0, 0, 9248, 0, 0, 15690, 0};
  for (size_t bytes : {size_t{0}, size_t{1}, 100 * kF, 10000 * kF, 100000 * kF}) {
    auto b = assign_buckets(sizes, bytes);
    expect_tiling(sizes, b);
  }
  EXPECT_EQ(assign_buckets(sizes, 1).size(), 3u);  // one bucket per layer with parameters
  EXPECT_EQ(assign_buckets(sizes, 10000 * kF).size(), 2u);
  EXPECT_TRUE(assign_buckets({0, 0, 0}, 4 * kF).empty());
  EXPECT_TRUE(assign_buckets({}, 4 * kF).empty());
}

TEST(Buckets, SizeZeroIsOneBucket) {
  std::vector<size_t> sizes = {7, 70000, 0, 3};
  auto b = assign_buckets(sizes, 0);
  expect_tiling(sizes, b);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].offset, 0u);
  EXPECT_EQ(b[0].count, 70010u);
}

TEST(Buckets, SameAnswerForTheSameInput) {
  std::vector<size_t> sizes = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5};
  auto a = assign_buckets(sizes, 8 * kF);
  auto b = assign_buckets(sizes, 8 * kF);
  expect_tiling(sizes, a);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].offset, b[i].offset);
    EXPECT_EQ(a[i].count, b[i].count);
  }
}

TEST(Buckets, MegabytesToBytes) {
  EXPECT_EQ(bucket_bytes_from_mb(0), 0u);
  EXPECT_EQ(bucket_bytes_from_mb(25), 25u * 1024 * 1024);
  EXPECT_EQ(bucket_bytes_from_mb(0.01), 10486u);
  EXPECT_THROW(bucket_bytes_from_mb(-1), UsageError);
  EXPECT_THROW(bucket_bytes_from_mb(std::nan("")), UsageError);
}

// Records the ranges reduced, in the order they started; a reduction doubles its range.
class RecordingComm : public testing_util::SoloCommunicator {
 public:
  std::vector<std::pair<size_t, size_t>> started;  // (first element, count)
  const float* base = nullptr;
  WorkHandle all_reduce_async(const void* send, void* recv, size_t count, DType,
                              ReduceOp) override {
    started.push_back({static_cast<size_t>(static_cast<const float*>(send) - base), count});
    auto* out = static_cast<float*>(recv);
    for (size_t i = 0; i < count; ++i) out[i] *= 2;
    return done();
  }
};

TEST(BucketReducer, StartsEachBucketWhenItsLayersAreDone) {
  std::vector<size_t> sizes = {4, 0, 4, 4};
  RecordingComm comm;
  BucketReducer r(comm, assign_buckets(sizes, 4 * kF));
  ASSERT_EQ(r.buckets().size(), 3u);
  std::vector<float> g(12, 1.0f);
  comm.base = g.data();
  r.start_step(g.data());
  r.layer_done(3);
  ASSERT_EQ(comm.started.size(), 1u);
  EXPECT_EQ(comm.started[0], (std::pair<size_t, size_t>{8, 4}));
  r.layer_done(2);
  ASSERT_EQ(comm.started.size(), 2u);
  EXPECT_EQ(comm.started[1], (std::pair<size_t, size_t>{4, 4}));
  r.layer_done(1);  // no parameters: layer 0's bucket must wait for layer 0
  EXPECT_EQ(comm.started.size(), 2u);
  r.layer_done(0);
  r.wait_all();
  ASSERT_EQ(comm.started.size(), 3u);
  for (float v : g) EXPECT_EQ(v, 2.0f) << "every element reduced exactly once";

  // A step whose backward reported nothing (accumulating micro-batches) reduces everything at
  // wait_all, once.
  comm.started.clear();
  r.start_step(g.data());
  r.wait_all();
  EXPECT_EQ(comm.started.size(), 3u);
  for (float v : g) EXPECT_EQ(v, 4.0f);
}

// Finishes each reduction 150 ms after it starts, on a thread of its own that doubles the range
// then: a reduction still in flight when its caller moves on, as the MPI backend's are.
class SlowComm : public testing_util::SoloCommunicator {
 public:
  struct State {
    std::mutex mutex;
    std::condition_variable cv;
    bool done = false;
  };
  struct SlowWork : Work {
    explicit SlowWork(std::shared_ptr<State> s) : state(std::move(s)) {}
    void wait(Millis timeout) override {
      std::unique_lock<std::mutex> lock(state->mutex);
      if (!state->cv.wait_for(lock, timeout, [&] { return state->done; }))
        throw Error("SlowWork: timed out");
    }
    bool done() override {
      std::lock_guard<std::mutex> lock(state->mutex);
      return state->done;
    }
    std::shared_ptr<State> state;
  };
  ~SlowComm() override {
    for (std::thread& t : threads) t.join();
  }
  WorkHandle all_reduce_async(const void*, void* recv, size_t count, DType, ReduceOp) override {
    auto state = std::make_shared<State>();
    threads.emplace_back([this, state, recv, count] {
      std::this_thread::sleep_for(std::chrono::milliseconds(150));
      auto* out = static_cast<float*>(recv);
      for (size_t i = 0; i < count; ++i) out[i] *= 2;
      finished += 1;
      std::lock_guard<std::mutex> lock(state->mutex);
      state->done = true;
      state->cv.notify_all();
    });
    return std::make_unique<SlowWork>(state);
  }
  std::vector<std::thread> threads;
  std::atomic<int> finished{0};
};

// A step that fails during its backward pass leaves reductions in flight into the gradients:
// drain() returns only after they have finished writing, starts no more, and drops their handles.
TEST(BucketReducer, DrainWaitsForTheReductionsInFlight) {
  SlowComm comm;
  BucketReducer r(comm, assign_buckets({4, 4}, 4 * kF));
  ASSERT_EQ(r.buckets().size(), 2u);
  std::vector<float> g(8, 1.0f);
  r.start_step(g.data());
  r.layer_done(1);  // layer 1's bucket starts; layer 0 fails before it is done
  EXPECT_EQ(comm.finished, 0);
  r.drain();
  EXPECT_EQ(comm.finished, 1) << "drain returned while a reduction could still write";
  for (size_t i = 4; i < 8; ++i) EXPECT_EQ(g[i], 2.0f) << "layer 1's range, reduced";
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(g[i], 1.0f) << "layer 0's bucket never started";
  r.drain();  // nothing left: returns at once
  EXPECT_EQ(comm.threads.size(), 1u);
}

// A device-buffer communicator (as NCCL is) that remembers the compute stream it was given.
class StreamRecordingComm : public testing_util::SoloCommunicator {
 public:
  StreamRecordingComm() : SoloCommunicator(/*device_buffers=*/true) {}
  void set_compute_stream(void* stream) override { stream_ = stream; }
  void* stream_ = nullptr;
};

TEST(BucketReducer, OrdersTheCommunicatorAfterItsStreamOnlyWhileItLives) {
  StreamRecordingComm comm;
  // Never dereferenced: with fp32 gradients over a device-buffer communicator the reducer only
  // hands the stream on, so no GPU is needed.
  auto* stream = reinterpret_cast<cudaStream_t>(uintptr_t{0x1000});
  {
    BucketReducer r(comm, assign_buckets({4, 4}, 0), Precision::fp32, DeviceKind::cuda, stream);
    EXPECT_EQ(comm.stream_, static_cast<void*>(stream));
  }
  // The trainer that owned the stream destroys it after the reducer: a communicator still ordered
  // after it would record events on a freed stream at its next collective.
  EXPECT_EQ(comm.stream_, nullptr);
}

// Rank 1 of a world of two whose other rank holds the same gradients: a reduce-scatter doubles
// this rank's block of the bucket (in place), and is recorded as (send - base, count).
class TwinComm : public testing_util::SoloCommunicator {
 public:
  int rank() const override { return 1; }
  int size() const override { return 2; }
  WorkHandle reduce_scatter_async(const void* send, void* recv, size_t count, DType,
                                  ReduceOp) override {
    started.push_back({static_cast<const float*>(send) - base, count});
    auto* out = static_cast<float*>(recv);
    for (size_t i = 0; i < count; ++i) out[i] *= 2;
    return done();
  }
  std::vector<std::pair<ptrdiff_t, size_t>> started;
  const float* base = nullptr;
};

// ZeRO stage 2: the layers write into the reducer's staging, two ring slots taken in turn (a
// layer's gradient there zeroed before each of its backward passes) and a region of its own for
// the bucket a tied layer adds to early; every micro-batch reduce-scatters, and this rank's
// blocks of the sums accumulate in sharded_grads(), in bucket order.
TEST(BucketReducer, StageTwoSumsEveryMicroBatchIntoThisRanksBlocks) {
  TwinComm comm;
  // Four layers of 8 floats, a bucket each: buckets 0-2 (layers 3, 2, 1) in the ring, bucket 3
  // (layer 0, which layer 3 adds to early) apart.
  BucketReducer r(comm, assign_buckets({8, 8, 8, 8}, 8 * kF), Precision::fp32, DeviceKind::cpu,
                  nullptr, /*stage=*/2, /*early=*/{0});
  ASSERT_EQ(r.buckets().size(), 4u);
  float* layer[4];
  for (int i = 0; i < 4; ++i) layer[i] = r.gradient_at(static_cast<size_t>(i) * 8);
  EXPECT_EQ(layer[3], layer[1]) << "buckets 0 and 2 take turns in one slot";
  EXPECT_NE(layer[3], layer[2]);
  EXPECT_EQ(r.gradient_floats(), 3 * 8 + 4 * 4u) << "two slots, a region apart, 4 blocks of 4";
  comm.base = layer[3] < layer[2] ? layer[3] : layer[2];
  r.start_step(nullptr);
  for (int mb = 1; mb <= 2; ++mb) {
    r.begin_micro_batch();
    for (int i = 3; i >= 0; --i) {
      for (int k = 0; k < 8; ++k) layer[i][k] += static_cast<float>((i + 1) * mb);
      if (i == 3)
        for (int k = 0; k < 8; ++k) layer[0][k] += 100;  // the tie: before layer 0's turn
      r.layer_done(i);
    }
  }
  r.wait_all();
  EXPECT_EQ(comm.started.size(), 8u) << "each bucket once per micro-batch";
  const float* shard = r.sharded_grads();
  for (int b = 0; b < 4; ++b) {
    const int i = 3 - b;  // bucket b holds layer i
    const float want = i == 0 ? 2 * (1 + 100 + 2 + 100) : 2 * (i + 1) * (1 + 2);
    for (int k = 0; k < 4; ++k)
      EXPECT_EQ(shard[b * 4 + k], want) << "layer " << i << " [" << k << "]";
  }
  const auto blocks = r.shard();
  ASSERT_EQ(blocks.size(), 4u);
  EXPECT_EQ(blocks[0], (std::pair<size_t, size_t>{24 + 4, 4}))
      << "rank 1: each bucket's second half";

  // A step starts from zero again.
  r.start_step(nullptr);
  r.begin_micro_batch();
  for (int i = 3; i >= 0; --i) {
    layer[i][0] += 1;
    r.layer_done(i);
  }
  r.wait_all();
  for (int b = 0; b < 4; ++b) EXPECT_EQ(shard[b * 4], 0.0f) << "element 0 is rank 0's";
  EXPECT_THROW(r.start_step(std::vector<float>(32).data()), Error) << "stage 2 owns the gradients";
}

// A layer that reports below its bucket's unreported first layer has written into a slot that
// was not made ready: refused in words, not summed wrong.
TEST(BucketReducer, StageTwoRefusesALayerReportingOutOfTurn) {
  TwinComm comm;
  BucketReducer r(comm, assign_buckets({8, 8, 8}, 8 * kF), Precision::fp32, DeviceKind::cpu,
                  nullptr, 2);
  r.start_step(nullptr);
  r.begin_micro_batch();
  try {
    r.layer_done(0);
    ADD_FAILURE() << "layer 0 reported before layers 2 and 1 unnoticed";
  } catch (const Error& e) {
    EXPECT_NE(std::string::npos, std::string(e.what()).find("first of its bucket")) << e.what();
  }
  r.drain();
}

}  // namespace
