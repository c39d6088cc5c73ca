#include "runtime/bootstrap.h"

#include <mpi.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <exception>
#include <memory>
#include <thread>
#include <vector>

#include "runtime/error.h"
#include "runtime/launch_env.h"
#include "runtime/log.h"

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
  check_launch_env(&world_);
}

MpiSession::~MpiSession() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

World discover_world() {
  World w;
  LS_CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &w.rank));
  LS_CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &w.size));
  MPI_Comm local = MPI_COMM_NULL;
  LS_CHECK_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, w.rank, MPI_INFO_NULL, &local));
  LS_CHECK_MPI(MPI_Comm_rank(local, &w.local_rank));
  LS_CHECK_MPI(MPI_Comm_size(local, &w.local_size));
  MPI_Comm_free(&local);
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int len = 0;
  LS_CHECK_MPI(MPI_Get_processor_name(name, &len));
  w.host.assign(name, len);
  return w;
}

void agree_or_throw(bool ok, const std::string& message) {
  int rank = 0;
  LS_CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  int mine = ok ? INT_MAX : rank;
  int first_bad = INT_MAX;
  LS_CHECK_MPI(MPI_Allreduce(&mine, &first_bad, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  if (first_bad == INT_MAX) return;
  int len = rank == first_bad ? static_cast<int>(message.size()) : 0;
  LS_CHECK_MPI(MPI_Bcast(&len, 1, MPI_INT, first_bad, MPI_COMM_WORLD));
  std::string text(static_cast<size_t>(len), '\0');
  if (rank == first_bad) text = message;
  LS_CHECK_MPI(MPI_Bcast(text.data(), len, MPI_CHAR, first_bad, MPI_COMM_WORLD));
  throw UsageError(text);
}

namespace {
// How long a rank other than 0 waits for rank 0 to report a SharedInputError and end the job.
constexpr std::chrono::milliseconds kSharedErrorGrace{2000};
}  // namespace

void end_job_now(const std::string& message) noexcept {
  std::string text = message;
  if (text.rfind("[rank ", 0) != 0) text = rank_prefix() + " " + text;
  std::fprintf(stderr, "error: %s\n", text.c_str());
  std::fflush(stderr);
  std::fflush(stdout);
  int running = 0, finalized = 0, size = 1;
  MPI_Initialized(&running);
  MPI_Finalized(&finalized);
  if (running && !finalized) MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size > 1) MPI_Abort(MPI_COMM_WORLD, kExitError);
  // A world of one can leave on its own; skip MPI_Finalize, a collective may still be pending.
  _exit(kExitError);
}

int run_app(int argc, char** argv, const std::function<int(const World&)>& body) {
  std::unique_ptr<MpiSession> session;
  World world;
  try {
    session = std::make_unique<MpiSession>(&argc, &argv);
    world = session->world();
    int rc = body(world);
    std::fflush(stdout);
    return rc;
  } catch (const UsageError& e) {
    if (world.rank == 0) std::fprintf(stderr, "error: %s\n", e.what());
    std::fflush(stderr);
    return kExitUsage;
  } catch (const SharedInputError& e) {
    if (world.rank != 0) std::this_thread::sleep_for(kSharedErrorGrace);
    end_job_now(e.what());
  } catch (const std::exception& e) {
    end_job_now(e.what());
  } catch (...) {
    end_job_now("unknown exception");
  }
}

}  // namespace lockstep
