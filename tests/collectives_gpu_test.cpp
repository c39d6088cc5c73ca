// The collective cases of collective_cases.h on the NCCL backend with device buffers (one rank on
// one GPU), plus what only a GPU backend has: ordering after the compute stream without blocking
// the host, the watchdog that aborts a stalled collective, a deadline on creating the
// communicator, and a device activation that keeps the stream-ordered scratch (NCCL's) mapped
// across synchronisations. Skips, with the reason, where no GPU answers or the build has no CUDA.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <thread>
#include <vector>

#if LOCKSTEP_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "collective_cases.h"
#include "gpu_test_util.h"
#include "kernels/cuda/memory.h"
#include "runtime/base/communicator.h"
#include "runtime/base/error.h"
#include "runtime/comm/nccl_bootstrap.h"
#include "runtime/process/context.h"
#include "runtime/process/device.h"

using namespace lockstep;
using namespace lockstep::testing_util;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

#if LOCKSTEP_HAVE_CUDA
void CUDART_CB sleep_on_stream(void* millis) {
  std::this_thread::sleep_for(milliseconds(reinterpret_cast<uintptr_t>(millis)));
}
#endif

// Work queued on `stream` after this call starts `delay` later, as on a straggling rank; the host
// does not wait.
void stall(cudaStream_t stream, milliseconds delay) {
#if LOCKSTEP_HAVE_CUDA
  auto ms = static_cast<uintptr_t>(delay.count());
  if (cudaLaunchHostFunc(stream, sleep_on_stream, reinterpret_cast<void*>(ms)) != cudaSuccess)
    throw std::runtime_error("cudaLaunchHostFunc failed");
#else
  throw std::runtime_error("stall needs the CUDA build");  // unreachable: the fixture skipped
#endif
}

// A device buffer of n bytes, freed at scope end.
struct DeviceBytes {
  explicit DeviceBytes(size_t n) : ptr(kernels::cuda_alloc(n)), size(n) {}
  ~DeviceBytes() { kernels::cuda_free(ptr); }
  std::vector<uint8_t> read() const {
    std::vector<uint8_t> host(size);
    kernels::cuda_copy_to_host(host.data(), ptr, size);
    return host;
  }
  void* ptr;
  size_t size;
};

using NcclCollectives = OnGpu0;
using DeviceActivation = OnGpu0;

SharedCases& shared() {
  static SharedCases cases(
      [] {
        auto comm = make_nccl_communicator(0);
        comm->set_timeout(std::chrono::seconds(120));
        return comm;
      },
      device_buffer_ops);
  return cases;
}

class NcclTypeMatrix : public OnGpu0, public testing::WithParamInterface<DType> {
 protected:
  static void TearDownTestSuite() { shared().release(); }
};

class NcclLarge : public OnGpu0, public testing::WithParamInterface<LargeCase> {
 protected:
  static void TearDownTestSuite() { shared().release(); }
};

}  // namespace

TEST_P(NcclTypeMatrix, EveryOpAndSizeOnDeviceBuffers) {
  ASSERT_EQ(Backend::nccl, shared().comm().backend());
  run_type_matrix(shared().comm(), shared().buffers(), GetParam());
}
INSTANTIATE_TEST_SUITE_P(Collectives, NcclTypeMatrix, testing::ValuesIn(all_dtypes()),
                         dtype_case_name);

TEST_P(NcclLarge, SixtyFourMiBOnDeviceBuffers) {
  run_large_case(shared().comm(), shared().buffers(), GetParam());
}
INSTANTIATE_TEST_SUITE_P(Collectives, NcclLarge, testing::ValuesIn(large_cases()), large_case_name);

TEST_F(NcclCollectives, WaitsForComputeStreamWithoutBlockingHost) {
  auto comm = make_nccl_communicator(0);
  const size_t n = 4096;
  DeviceBytes send(n), recv(n);
  std::vector<uint8_t> sevens(n, 7);
  kernels::cuda_copy_to_device(send.ptr, sevens.data(), n);
  cudaStream_t compute = kernels::cuda_stream_create();
  // The compute stream zeroes `send` only after a delay: a collective that did not wait for it
  // would deliver the 7s.
  stall(compute, milliseconds(500));
  kernels::cuda_zero(send.ptr, n, compute);
  comm->set_compute_stream(compute);
  auto work = comm->all_reduce_async(send.ptr, recv.ptr, n, DType::u8, ReduceOp::sum);
  EXPECT_FALSE(work->done()) << "the collective ran before the compute stream's work";
  work->wait(std::chrono::seconds(30));
  EXPECT_EQ(std::vector<uint8_t>(n, 0), recv.read());
  kernels::cuda_stream_destroy(compute);
}

// Each collective's completion event comes from a pool: once warm, a thousand collectives create
// no CUDA event (issue 31: one was created per collective).
TEST_F(NcclCollectives, CollectivesReuseTheirCompletionEvents) {
  auto comm = make_nccl_communicator(0);
  DeviceBytes send(256), recv(256);
  for (int i = 0; i < 20; ++i) comm->all_reduce(send.ptr, recv.ptr, 64, DType::f32, ReduceOp::sum);
  const size_t warm = nccl_completion_events_created();
  EXPECT_GT(warm, 0u) << "the counter counts nothing";
  for (int i = 0; i < 1000; ++i) {
    auto a = comm->all_reduce_async(send.ptr, recv.ptr, 64, DType::f32, ReduceOp::sum);
    auto b = comm->broadcast_async(recv.ptr, 64, DType::f32, 0);
    a->wait(std::chrono::seconds(30));
    b->wait(std::chrono::seconds(30));
  }
  // At most one more, for the second handle in flight at once.
  EXPECT_LE(nccl_completion_events_created(), warm + 1);
}

TEST_F(NcclCollectives, StalledCollectiveTimesOutNamingCollectiveAndRank) {
  auto comm = make_nccl_communicator(0);
  DeviceBytes buf(1024);
  cudaStream_t compute = kernels::cuda_stream_create();
  stall(compute, milliseconds(3000));
  comm->set_compute_stream(compute);
  const auto deadline = milliseconds(300);
  auto start = Clock::now();
  auto work = comm->all_reduce_async(buf.ptr, buf.ptr, 256, DType::f32, ReduceOp::sum);
  try {
    work->wait(deadline);
    ADD_FAILURE() << "wait returned although the collective could not start";
  } catch (const TimeoutError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("all_reduce"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[rank 0/1"), std::string::npos) << msg;
    EXPECT_NE(msg.find("aborted"), std::string::npos) << msg;
  }
  EXPECT_GE(Clock::now() - start, deadline);
  // The communicator is aborted: later collectives refuse at once instead of hanging.
  EXPECT_THROW(comm->barrier(), Error);
  comm.reset();
  kernels::cuda_stream_synchronize(compute);
  kernels::cuda_stream_destroy(compute);
}

TEST_F(NcclCollectives, BroadcastRejectsRootOutsideWorld) {
  auto comm = make_nccl_communicator(0);
  DeviceBytes buf(4);
  EXPECT_THROW(comm->broadcast(buf.ptr, 1, DType::f32, comm->size()), Error);
}

TEST_F(NcclCollectives, CudaContextUsesNcclOnTheLocalRanksGpu) {
  World world = discover_world();
  auto host = make_mpi_communicator();
  ContextOptions options;
  options.device = "cuda";
  Context ctx = make_context(world, *host, options);
  EXPECT_EQ(DeviceKind::cuda, ctx.device);
  EXPECT_EQ(0, ctx.device_index);
  EXPECT_EQ(host.get(), ctx.host) << "host values stay on the world's MPI communicator";
  ASSERT_NE(nullptr, ctx.grads);
  EXPECT_EQ(Backend::nccl, ctx.grads->backend());
  ctx.grads->barrier();
}

TEST_F(NcclCollectives, CreationHonoursItsTimeout) {
  // Given at creation, the timeout covers the initialisation too; it is the collectives' as well.
  auto comm = make_nccl_communicator(0, std::chrono::seconds(45));
  EXPECT_EQ(std::chrono::milliseconds(45'000), comm->timeout());
  comm->barrier();
}

TEST_F(DeviceActivation, FreedStreamOrderedScratchStaysMappedAcrossASynchronisation) {
#if LOCKSTEP_HAVE_CUDA
  // With the default pool's release threshold of 0, the synchronisation below would unmap the
  // freed 64 MiB, and the next cudaMallocAsync would map it again: at every step.
  const size_t bytes = size_t{64} << 20;
  cudaMemPool_t pool = nullptr;
  ASSERT_EQ(cudaSuccess, cudaDeviceGetDefaultMemPool(&pool, 0));
  cudaStream_t stream = kernels::cuda_stream_create();
  void* scratch = nullptr;
  ASSERT_EQ(cudaSuccess, cudaMallocAsync(&scratch, bytes, stream));
  ASSERT_EQ(cudaSuccess, cudaFreeAsync(scratch, stream));
  kernels::cuda_stream_synchronize(stream);
  uint64_t reserved = 0;
  ASSERT_EQ(cudaSuccess,
            cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved));
  EXPECT_GE(reserved, bytes) << "the pool gave the freed scratch back at the synchronisation";
  kernels::cuda_stream_destroy(stream);
#endif
}
