// Process bootstrap: MPI start-up and shut-down, where this process sits in the job, and the
// world's host communicator. MpiSession is created once per process, first thing in main(). A
// program started without mpirun is a world of one. Not thread-safe; the main thread owns it.
// Collective: every rank constructs MpiSession (MPI_Init, then a check of the launcher's
// view over the world) and calls run_app at the same point.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "runtime/base/communicator.h"
#include "runtime/base/exit.h"

namespace lockstep {

// Where this process sits: global rank and size, rank and size among the ranks on this host
// (MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)), and the host name.
struct World {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  std::string host;
  // This rank's GPU slot (launch_env.h): which of its visible GPUs to take, and how many ranks of
  // this host see the same GPUs. gpu_peers == 0: not known yet, local_rank/local_size apply.
  int gpu_index = 0;
  int gpu_peers = 0;
  // "launcher: ...; MPI: ... rank(s) ...; GPU slot ..." (check_launch_env), logged at debug level:
  // start-up stays quiet unless LOCKSTEP_LOG_LEVEL=debug or an app's --verbose asks for it.
  std::string launch_summary;
};

class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);
  ~MpiSession();  // MPI_Finalize, unless the job is being aborted
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  const World& world() const { return world_; }
  bool thread_multiple() const { return thread_multiple_; }
  // Every rank of the job, over host memory (MPI): start-up agreement (agree.h), options, and the
  // host values of everything that runs on the whole world (Context::host). Made before anything
  // else, so even the launch environment check agrees through it; lives until MPI_Finalize.
  Communicator& world_comm() { return *world_comm_; }

 private:
  World world_;
  bool thread_multiple_ = false;
  std::unique_ptr<Communicator> world_comm_;
};

// Learns rank, size, local rank/size and host from MPI_COMM_WORLD.
World discover_world();

// Runs an app's body with the top-level error handling every app shares. The body gets the world
// and its host communicator (MpiSession::world_comm). Otherwise returns what the body returned.
//  - AgreedUsageError: every rank has it; rank 0 prints it once and every rank returns kExitUsage.
//  - UsageError: this rank's own. In a world of one it is printed and kExitUsage returned. With
//    more ranks, the rank prints it with its rank prefix and aborts the job with kExitUsage, so no
//    peer waits for it; a rank other than 0 first gives rank 0 a short grace, so an error every
//    rank found alike (the same command line) is printed once, by rank 0.
//  - SharedInputError: as UsageError, with kExitError.
//  - anything else: printed by the rank that saw it, with its prefix, and the job is aborted
//    (MPI_Abort, kExitError) so no peer waits forever.
int run_app(int argc, char** argv, const std::function<int(const World&, Communicator&)>& body);

}  // namespace lockstep
