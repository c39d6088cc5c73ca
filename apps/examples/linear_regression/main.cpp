// Linear regression, data parallel: the pmap tutorial's y = x.w + b, learned by SGD on every rank
// of an MPI job, against Lockstep's low-level API. Each rank draws its own shard of the data; the
// gradients are averaged over the ranks by the communicator's all-reduce (what lax.pmean does), so
// every rank applies the same update; the replica checksum confirms the parameters stay identical.
// Prints the learned w and b; exits 1 when one is further than 0.05 from the truth.
//
//   mpiexec -n 4 ./linear_regression
#include <lockstep/base/communicator.h>
#include <lockstep/comm/replica_check.h>
#include <lockstep/process/bootstrap.h>
#include <lockstep/version.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

namespace ls = lockstep;

constexpr int kFeatures = 4;
constexpr int kRowsPerRank = 256;
constexpr int kSteps = 300;
constexpr float kLearningRate = 0.1f;

int train(const ls::World& world, ls::Communicator& comm) {
  // The truth is the same on every rank (one seed); the data is this rank's own (seeded by rank).
  std::normal_distribution<float> normal(0.f, 1.f);
  std::mt19937 truth_rng(42);
  std::vector<float> true_w(kFeatures);
  for (float& v : true_w) v = normal(truth_rng);
  const float true_b = normal(truth_rng);
  std::mt19937 rng(1000 + world.rank);
  std::vector<float> x(kRowsPerRank * kFeatures), y(kRowsPerRank);
  for (int i = 0; i < kRowsPerRank; ++i) {
    y[i] = true_b + 0.1f * normal(rng);
    for (int j = 0; j < kFeatures; ++j) y[i] += (x[i * kFeatures + j] = normal(rng)) * true_w[j];
  }

  // Replicated parameters, w then b, in one flat buffer: zero on every rank.
  std::vector<float> params(kFeatures + 1, 0.f), grads(kFeatures + 1);
  for (int step = 1; step <= kSteps; ++step) {
    std::fill(grads.begin(), grads.end(), 0.f);
    float loss = 0.f;  // mean squared error over this rank's rows, then over all ranks
    for (int i = 0; i < kRowsPerRank; ++i) {
      const float* xi = &x[i * kFeatures];
      float err = params[kFeatures] - y[i];
      for (int j = 0; j < kFeatures; ++j) err += params[j] * xi[j];
      loss += err * err / kRowsPerRank;
      for (int j = 0; j < kFeatures; ++j) grads[j] += 2.f * err * xi[j] / kRowsPerRank;
      grads[kFeatures] += 2.f * err / kRowsPerRank;
    }
    // pmean: every rank receives the mean of all ranks' gradients (equal shards: the global mean).
    comm.all_reduce(grads.data(), grads.data(), grads.size(), ls::DType::f32, ls::ReduceOp::mean);
    comm.all_reduce(&loss, &loss, 1, ls::DType::f32, ls::ReduceOp::mean);
    for (size_t k = 0; k < params.size(); ++k) params[k] -= kLearningRate * grads[k];
    if (step % 100 == 0) {
      ls::check_replicas(comm, params, "at step " + std::to_string(step));  // throws on a mismatch
      if (world.rank == 0) std::printf("step %d  loss %.5f\n", step, loss);
    }
  }

  float worst = std::fabs(params[kFeatures] - true_b);
  for (int j = 0; j < kFeatures; ++j) worst = std::max(worst, std::fabs(params[j] - true_w[j]));
  if (world.rank == 0) {
    std::printf("Lockstep %s, %d rank(s), %d rows each\n", LOCKSTEP_VERSION_STRING, world.size,
                kRowsPerRank);
    for (int j = 0; j < kFeatures; ++j)
      std::printf("w[%d] = %+.4f  (true %+.4f)\n", j, params[j], true_w[j]);
    std::printf("b    = %+.4f  (true %+.4f)\n", params[kFeatures], true_b);
    std::printf("%s: largest error %.4f (limit 0.05)\n", worst <= 0.05f ? "ok" : "FAILED", worst);
  }
  return worst <= 0.05f ? 0 : 1;  // the same on every rank: the parameters are identical
}

// run_app starts MPI (a world of one without mpiexec), hands the body the world's communicator,
// and turns an exception on any rank into one message and a non-zero exit on every rank.
int main(int argc, char** argv) { return ls::run_app(argc, argv, train); }
