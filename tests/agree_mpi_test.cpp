// Agreement over a Communicator (agree.h) at 1, 2 and 4 ranks: every rank of the communicator
// leaves with the lowest failing rank's message, as an AgreedUsageError (the type the top-level
// handler prints once, on rank 0), and ranks outside it take no part. Resuming a
// trainer agrees over the trainer's own communicator, so ranks that each train alone (a world of
// one) refuse or accept their own checkpoints independently. Host-side collectives refuse a
// communicator that takes device buffers (NCCL) instead of handing it host pointers.
#include <gtest/gtest.h>
#include <mpi.h>

#include <string>

#include "runtime/base/error.h"
#include "runtime/comm/agree.h"
#include "runtime/train/checkpoint.h"
#include "runtime/train/step_guard.h"
#include "runtime/train/train_checkpoint.h"
#include "runtime/train/trainer.h"
#include "solo_communicator.h"
#include "test_util.h"
#include "train_fixtures.h"

using namespace lockstep;
using lockstep::testing_util::SoloCommunicator;

namespace {

int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

// A small image set written once by rank 0 into a folder every rank knows.
const std::string& data_file() {
  static const std::string path = [] {
    const std::string dir = testing_util::shared_temp_dir("agree");
    if (world_rank() == 0) testing_util::write_striped_images(dir + "/images.h5", {});
    MPI_Barrier(MPI_COMM_WORLD);
    return dir + "/images.h5";
  }();
  return path;
}

TrainConfig small_config() {
  TrainConfig c;
  c.train.path = data_file();
  c.model = "mlp:8";
  c.global_batch = 16;
  c.steps = 2;
  c.eval_every_epoch = false;
  c.print = false;
  return c;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST(AgreeOverCommunicator, EveryRankGetsTheLowestFailingRanksMessage) {
  auto comm = make_mpi_communicator();
  EXPECT_NO_THROW(agree_or_throw(*comm, true, "unused"));
  const int first_bad = comm->size() / 2;  // rank 0 alone at 1 rank
  const bool ok = comm->rank() < first_bad;
  try {
    agree_or_throw(*comm, ok, "rank " + std::to_string(comm->rank()) + " found a problem");
    ADD_FAILURE() << "rank " << comm->rank() << " returned although rank " << first_bad
                  << " failed";
  } catch (const AgreedUsageError& e) {
    EXPECT_EQ(std::string(e.what()), "rank " + std::to_string(first_bad) + " found a problem");
  } catch (const UsageError& e) {
    ADD_FAILURE() << "a plain UsageError, which run_app treats as this rank's alone: " << e.what();
  }
}

TEST(AgreeOverCommunicator, FirstProblemNamesTheLowestRankAndCountsThem) {
  auto comm = make_mpi_communicator();
  EXPECT_FALSE(first_problem(*comm, true, "unused").has_value());
  // The odd ranks fail (rank 0 alone at 1 rank, so that a problem exists at every size).
  const bool ok = comm->size() > 1 && comm->rank() % 2 == 0;
  const auto p = first_problem(*comm, ok, "rank " + std::to_string(comm->rank()));
  ASSERT_TRUE(p.has_value());
  const int first = comm->size() > 1 ? 1 : 0;
  EXPECT_EQ(first, p->rank);
  EXPECT_EQ(comm->size() > 1 ? comm->size() / 2 : 1, p->ranks);
  EXPECT_EQ("rank " + std::to_string(first), p->message);
}

TEST(AgreeOverCommunicator, RanksOutsideTheCommunicatorTakeNoPart) {
  // Each rank agrees with itself alone: no rank waits for another, and a failure stays local.
  SoloCommunicator solo;
  const bool ok = world_rank() % 2 == 0;
  if (ok) {
    EXPECT_NO_THROW(agree_or_throw(solo, ok, "unused"));
  } else {
    EXPECT_THROW(agree_or_throw(solo, ok, "odd rank"), UsageError);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(AgreeOverCommunicator, ResumeAgreesOverTheTrainersCommunicatorOnly) {
  // Every rank trains alone and writes its own checkpoint; rank 0 resumes from it while the other
  // ranks ask for a file that does not exist. Agreeing over MPI_COMM_WORLD would make rank 0
  // refuse with another rank's message; over the trainer's communicator only the others refuse.
  const std::string dir =
      testing_util::shared_temp_dir("agree-resume") + "/rank" + std::to_string(world_rank());
  SoloCommunicator solo;
  Trainer first(solo, small_config());
  first.run();
  const std::string saved = save_checkpoint(dir, capture_checkpoint(first, 1), 0);

  Trainer again(solo, small_config());
  const std::string wanted = world_rank() == 0 ? saved : dir + "/missing.h5";
  try {
    EXPECT_EQ(resume_from_checkpoint(again, wanted), saved);
    EXPECT_EQ(world_rank(), 0) << "resumed from " << wanted;
    EXPECT_EQ(again.state().global_step, 2);
  } catch (const UsageError& e) {
    EXPECT_NE(world_rank(), 0) << "rank 0's good checkpoint was refused: " << e.what();
    EXPECT_TRUE(contains(e.what(), wanted)) << e.what();
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(AgreeOverCommunicator, OnlyRankZeroReadsTheCheckpointToResume) {
  // All ranks train together; rank 0 saves. Resuming, only rank 0 names the file (the others a
  // folder they cannot see, as with a node-local --checkpoint-dir): rank 0 reads it and every rank
  // continues from its state, the same as rank 0's.
  auto comm = make_mpi_communicator();
  TrainConfig c = small_config();
  c.global_batch = 8 * comm->size();  // at most the 64 rows at 6 ranks
  Trainer first(*comm, c);
  first.run();
  const std::string dir = testing_util::shared_temp_dir("agree-resume-rank0");
  const std::string saved =
      world_rank() == 0 ? save_checkpoint(dir, capture_checkpoint(first, comm->size()), 0) : "";
  c.steps = 4;
  Trainer again(*comm, c);
  const std::string wanted =
      world_rank() == 0 ? saved : "/nonexistent/rank" + std::to_string(world_rank());
  const std::string used = resume_from_checkpoint(again, wanted);
  if (world_rank() == 0) {
    EXPECT_EQ(saved, used);
  }
  EXPECT_EQ(2, again.state().global_step);
  EXPECT_EQ(first.model().params_to_host(), again.model().params_to_host());
  EXPECT_EQ(first.optimizer().steps(), again.optimizer().steps());
  again.run();  // verifies the replicas when it starts
  EXPECT_EQ(4, again.state().global_step);
}

TEST(AgreeOverCommunicator, HostValuesNeverReachADeviceBufferCommunicator) {
  SoloCommunicator device(/*device_buffers=*/true);
  try {
    agree_or_throw(device, true, "unused");
    ADD_FAILURE() << "agreement passed host values to a device-buffer communicator";
  } catch (const UsageError& e) {
    EXPECT_TRUE(contains(e.what(), "takes device buffers only")) << e.what();
  }
  EXPECT_THROW(StepGuard(device, GuardOptions{}), UsageError);
  try {
    Trainer t(device, small_config());
    ADD_FAILURE() << "a Trainer was built over a device-buffer communicator";
  } catch (const UsageError& e) {
    EXPECT_TRUE(contains(e.what(), "the trainer")) << e.what();
  }
}
