// What the launcher told this process: which launcher started it (Open MPI's mpirun, Slurm's
// srun, MPICH's Hydra, another PMIx launcher, or none), the launcher's idea of rank, local rank and
// local size, the Slurm job, and which GPUs the process may see (CUDA_VISIBLE_DEVICES).
//
// detect_launch_env() is a pure function of an environment map, so every launcher is unit-tested
// with synthetic environments. MPI's own answer (MPI_Comm_split_type, bootstrap.h) stays the
// authority; check_launch_env() compares the two at start-up, warns on a disagreement and logs the
// launcher (at debug level). GPU choice: ranks that see different GPU sets (Slurm
// --gpus-per-task, a wrapper that sets CUDA_VISIBLE_DEVICES per rank) do not share a device, so
// each takes index 0 of its own set;
// gpu_slot() says which visible index a rank takes and how many ranks compete for the same set.
// Not thread-safe; called from the main thread during start-up.
// Collective: check_launch_env, over the world (MpiSession calls it); the rest reads the
// environment only.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "runtime/process/bootstrap.h"

namespace lockstep {

using EnvMap = std::map<std::string, std::string>;

enum class Launcher { none, openmpi, slurm, mpich, pmix };
const char* launcher_name(Launcher l);

struct LaunchEnv {
  Launcher launcher = Launcher::none;
  // The launcher's idea of where this process sits; -1 where it says nothing.
  int rank = -1;
  int size = -1;
  int local_rank = -1;
  int local_size = -1;
  int node_index = -1;  // Slurm: SLURM_NODEID
  int node_count = -1;  // Slurm: SLURM_STEP_NUM_NODES or SLURM_JOB_NUM_NODES
  // Slurm job and step, also when mpirun runs inside an allocation ("" outside Slurm).
  std::string slurm_job_id;
  std::string slurm_step_id;
  // CUDA_VISIBLE_DEVICES as a list (ids, UUIDs or MIG names); nullopt when unset (all GPUs).
  std::optional<std::vector<std::string>> visible_gpus;
  std::vector<std::string> slurm_gpus;  // SLURM_STEP_GPUS, else SLURM_JOB_GPUS
  // Values that were set but could not be read, in words ("SLURM_LOCALID='x' is not a number").
  std::vector<std::string> problems;
};

// Reads a launch environment. Never throws; a malformed value is left out and named in problems.
LaunchEnv detect_launch_env(const EnvMap& env);

// This process's environment as a map.
EnvMap process_env();

// One line for the start-up log, e.g. "slurm (job 42 step 0, node 1/2), rank 3/4, local 1/2,
// CUDA_VISIBLE_DEVICES=2".
std::string describe(const LaunchEnv& env);

// Where the launcher and MPI disagree (rank, size, local rank, local size), one sentence each;
// empty when they agree or the launcher says nothing.
std::vector<std::string> disagreements(const LaunchEnv& env, const World& world);

// Expands Slurm's compressed per-node task counts ("2(x3),1" -> 2,2,2,1); nullopt if malformed.
std::optional<std::vector<int>> expand_slurm_tasks_per_node(const std::string& text);

// A rank's GPU slot among the ranks of its host that see the same GPUs.
struct GpuSlot {
  int index = 0;  // which of the visible GPUs to take, before wrapping by the device count
  int peers = 1;  // how many ranks of this host see the same GPU set (this one included)
};

// visible_by_local_rank[i]: CUDA_VISIBLE_DEVICES of local rank i, as read (nullopt = unset).
// Ranks with equal values share that set and are numbered in local-rank order.
GpuSlot gpu_slot(const std::vector<std::optional<std::string>>& visible_by_local_rank,
                 int local_rank);

// The slot check_launch_env() stored in `world`, or local rank/size when it has not run.
GpuSlot gpu_slot(const World& world);

// Collective over `world_comm` (every rank of the job, host memory) and MPI_COMM_WORLD, called once
// by MpiSession after the world is known: stores the
// launcher line in world->launch_summary and logs it at debug level (rank 0), warns when the
// launcher and MPI disagree (MPI wins), and stores this rank's GPU slot in world->gpu_index /
// world->gpu_peers.
void check_launch_env(World* world, Communicator& world_comm);

}  // namespace lockstep
