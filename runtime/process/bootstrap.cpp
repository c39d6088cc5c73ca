#include "runtime/process/bootstrap.h"

#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <memory>
#include <thread>
#include <vector>

#include "runtime/base/error.h"
#include "runtime/base/log.h"
#include "runtime/process/launch_env.h"

namespace lockstep {

MpiSession::MpiSession(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = MPI_THREAD_SINGLE;
    LS_CHECK_MPI(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided));
    thread_multiple_ = provided >= MPI_THREAD_MULTIPLE;
  } else {
    int provided = MPI_THREAD_SINGLE;
    MPI_Query_thread(&provided);
    thread_multiple_ = provided >= MPI_THREAD_MULTIPLE;
  }
  // Errors come back as codes so the check macro can turn them into messages.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  world_ = discover_world();
  set_rank_prefix(world_.rank, world_.size, world_.host);
  init_logging(world_.rank);
  world_comm_ = make_mpi_communicator();
  try {
    check_launch_env(&world_, *world_comm_);
  } catch (...) {
    // A launch this process cannot train in (tasks that are MPI jobs of their own): MPI ends
    // cleanly here, since no destructor will.
    world_comm_.reset();
    MPI_Finalize();
    throw;
  }
}

MpiSession::~MpiSession() {
  world_comm_.reset();  // its progress thread and MPI communicator go before MPI_Finalize
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

World discover_world() {
  World w;
  LS_CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &w.rank));
  LS_CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &w.size));
  MPI_Comm local = MPI_COMM_NULL;
  LS_CHECK_MPI(
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, w.rank, MPI_INFO_NULL, &local));
  LS_CHECK_MPI(MPI_Comm_rank(local, &w.local_rank));
  LS_CHECK_MPI(MPI_Comm_size(local, &w.local_size));
  MPI_Comm_free(&local);
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int len = 0;
  LS_CHECK_MPI(MPI_Get_processor_name(name, &len));
  w.host.assign(name, len);
  return w;
}

namespace {
// How long a rank other than 0 waits for rank 0 to report an error that every rank may have found
// alike (SharedInputError, a rank-local UsageError) and end the job, before it reports its own.
constexpr std::chrono::milliseconds kSharedErrorGrace{2000};

// Ends the job for an error this rank found, which its peers may have found too (see run_app).
[[noreturn]] void end_job_for_shared(const World& world, const std::string& message, int code) {
  if (world.rank != 0) std::this_thread::sleep_for(kSharedErrorGrace);
  end_job_now(message, code);
}
}  // namespace

int run_app(int argc, char** argv, const std::function<int(const World&, Communicator&)>& body) {
  std::unique_ptr<MpiSession> session;
  World world;
  try {
    session = std::make_unique<MpiSession>(&argc, &argv);
    world = session->world();
    int rc = body(world, session->world_comm());
    std::fflush(stdout);
    return rc;
  } catch (const AgreedUsageError& e) {
    if (world.rank == 0) std::fprintf(stderr, "error: %s\n", e.what());
    std::fflush(stderr);
    return kExitUsage;
  } catch (const UsageError& e) {
    if (world.size > 1) end_job_for_shared(world, e.what(), kExitUsage);
    std::fprintf(stderr, "error: %s\n", e.what());
    std::fflush(stderr);
    return kExitUsage;
  } catch (const SharedInputError& e) {
    end_job_for_shared(world, e.what(), kExitError);
  } catch (const std::exception& e) {
    end_job_now(e.what());
  } catch (...) {
    end_job_now("unknown exception");
  }
}

}  // namespace lockstep
