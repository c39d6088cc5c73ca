#include "runtime/process/launch_env.h"

#include <mpi.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <sstream>

#include "runtime/base/error.h"
#include "runtime/base/log.h"
#include "runtime/comm/agree.h"
#include "runtime/process/blas_threads.h"

extern char** environ;

namespace lockstep {
namespace {

const std::string* find(const EnvMap& env, const char* key) {
  auto it = env.find(key);
  return it == env.end() ? nullptr : &it->second;
}

// The first of `keys` that is set, or nullptr.
const std::string* find_first(const EnvMap& env, std::initializer_list<const char*> keys,
                              const char** found_key = nullptr) {
  for (const char* k : keys)
    if (const std::string* v = find(env, k)) {
      if (found_key) *found_key = k;
      return v;
    }
  return nullptr;
}

std::optional<int> to_int(const std::string& text) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || v < 0 || v > INT_MAX) return std::nullopt;
  return static_cast<int>(v);
}

// Reads the first of `keys` that is set as a non-negative integer; -1 when none is set or the
// value is malformed (then named in out->problems).
int read_int(const EnvMap& env, std::initializer_list<const char*> keys, LaunchEnv* out) {
  const char* key = nullptr;
  const std::string* v = find_first(env, keys, &key);
  if (!v) return -1;
  if (auto n = to_int(*v)) return *n;
  out->problems.push_back(std::string(key) + "='" + *v + "' is not a number");
  return -1;
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> items;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ','))
    if (std::string t = trim(item); !t.empty()) items.push_back(t);
  return items;
}

std::string join(const std::vector<std::string>& items, const char* sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? sep : "") + items[i];
  return out;
}

void detect_slurm(const EnvMap& env, LaunchEnv* out) {
  out->launcher = Launcher::slurm;
  out->rank = read_int(env, {"SLURM_PROCID"}, out);
  out->size = read_int(env, {"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS"}, out);
  out->local_rank = read_int(env, {"SLURM_LOCALID"}, out);
  out->node_index = read_int(env, {"SLURM_NODEID"}, out);
  out->node_count =
      read_int(env, {"SLURM_STEP_NUM_NODES", "SLURM_JOB_NUM_NODES", "SLURM_NNODES"}, out);
  // The step's own layout is exact; the job's describes the allocation, which srun may narrow.
  const char* key = nullptr;
  if (const std::string* per_node =
          find_first(env, {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}, &key)) {
    auto counts = expand_slurm_tasks_per_node(*per_node);
    if (!counts) {
      out->problems.push_back(std::string(key) + "='" + *per_node + "' is not a task count list");
    } else if (out->node_index >= 0 && out->node_index < static_cast<int>(counts->size())) {
      out->local_size = (*counts)[static_cast<size_t>(out->node_index)];
    } else if (counts->size() == 1) {
      out->local_size = counts->front();
    }
  }
  if (out->local_size < 0) out->local_size = read_int(env, {"SLURM_NTASKS_PER_NODE"}, out);
}

}  // namespace

const char* launcher_name(Launcher l) {
  switch (l) {
    case Launcher::none: return "none";
    case Launcher::openmpi: return "openmpi";
    case Launcher::slurm: return "slurm";
    case Launcher::mpich: return "mpich";
    case Launcher::pmix: return "pmix";
  }
  return "?";
}

std::optional<std::vector<int>> expand_slurm_tasks_per_node(const std::string& text) {
  std::vector<int> counts;
  for (const std::string& item : split_list(text)) {
    std::string count = item;
    int repeat = 1;
    if (size_t open = item.find("(x"); open != std::string::npos) {
      if (item.back() != ')') return std::nullopt;
      auto r = to_int(item.substr(open + 2, item.size() - open - 3));
      if (!r || *r == 0) return std::nullopt;
      repeat = *r;
      count = item.substr(0, open);
    }
    auto n = to_int(count);
    if (!n) return std::nullopt;
    counts.insert(counts.end(), static_cast<size_t>(repeat), *n);
  }
  if (counts.empty()) return std::nullopt;
  return counts;
}

LaunchEnv detect_launch_env(const EnvMap& env) {
  LaunchEnv out;
  if (const std::string* job = find_first(env, {"SLURM_JOB_ID", "SLURM_JOBID"}))
    out.slurm_job_id = *job;
  if (const std::string* step = find_first(env, {"SLURM_STEP_ID", "SLURM_STEPID"}))
    out.slurm_step_id = *step;
  if (const std::string* cvd = find(env, "CUDA_VISIBLE_DEVICES"))
    out.visible_gpus = split_list(*cvd);
  if (const std::string* g = find_first(env, {"SLURM_STEP_GPUS", "SLURM_JOB_GPUS"}))
    out.slurm_gpus = split_list(*g);

  // mpirun first: inside a Slurm allocation its ranks also inherit the batch step's SLURM_*.
  if (find(env, "OMPI_COMM_WORLD_RANK") || find(env, "OMPI_COMM_WORLD_LOCAL_RANK")) {
    out.launcher = Launcher::openmpi;
    out.rank = read_int(env, {"OMPI_COMM_WORLD_RANK"}, &out);
    out.size = read_int(env, {"OMPI_COMM_WORLD_SIZE"}, &out);
    out.local_rank = read_int(env, {"OMPI_COMM_WORLD_LOCAL_RANK"}, &out);
    out.local_size = read_int(env, {"OMPI_COMM_WORLD_LOCAL_SIZE"}, &out);
  } else if (!out.slurm_step_id.empty() && out.slurm_step_id != "batch" &&
             out.slurm_step_id != "extern" && find(env, "SLURM_PROCID")) {
    // A task of an srun step. The batch script itself (no step id, or "batch") is not: a program
    // started there without srun is a single process whatever the allocation holds.
    detect_slurm(env, &out);
  } else if (const std::string* ess = find(env, "OMPI_MCA_ess"); ess && *ess == "singleton") {
    // Open MPI started without a launcher; it sets PMIX_RANK for itself, which is no launcher's.
  } else if (find(env, "PMI_RANK") && find(env, "MPI_LOCALRANKID")) {
    out.launcher = Launcher::mpich;
    out.rank = read_int(env, {"PMI_RANK"}, &out);
    out.size = read_int(env, {"PMI_SIZE"}, &out);
    out.local_rank = read_int(env, {"MPI_LOCALRANKID"}, &out);
    out.local_size = read_int(env, {"MPI_LOCALNRANKS"}, &out);
  } else if (find(env, "PMIX_RANK")) {
    out.launcher = Launcher::pmix;
    out.rank = read_int(env, {"PMIX_RANK"}, &out);
  }
  return out;
}

EnvMap process_env() {
  EnvMap env;
  for (char** e = environ; e && *e; ++e) {
    std::string kv = *e;
    size_t eq = kv.find('=');
    if (eq != std::string::npos) env.emplace(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return env;
}

std::string describe(const LaunchEnv& env) {
  std::ostringstream os;
  os << launcher_name(env.launcher);
  if (env.launcher == Launcher::none)
    os << " (a single process, or a launcher Lockstep does not know)";
  std::vector<std::string> where;
  if (!env.slurm_job_id.empty()) {
    std::string job = "Slurm job " + env.slurm_job_id;
    if (!env.slurm_step_id.empty()) job += " step " + env.slurm_step_id;
    if (env.node_index >= 0 && env.node_count > 0)
      job += ", node " + std::to_string(env.node_index) + "/" + std::to_string(env.node_count);
    where.push_back(job);
  }
  auto of = [](int a, int b) {
    return std::to_string(a) + "/" + (b >= 0 ? std::to_string(b) : std::string("?"));
  };
  if (env.rank >= 0) where.push_back("rank " + of(env.rank, env.size));
  if (env.local_rank >= 0) where.push_back("local " + of(env.local_rank, env.local_size));
  if (!where.empty()) os << " (" << join(where, ", ") << ")";
  os << ", CUDA_VISIBLE_DEVICES="
     << (env.visible_gpus ? join(*env.visible_gpus, ",") : std::string("<unset>"));
  if (!env.slurm_gpus.empty()) os << ", Slurm GPUs " << join(env.slurm_gpus, ",");
  return os.str();
}

std::vector<std::string> disagreements(const LaunchEnv& env, const World& world) {
  std::vector<std::string> out;
  const std::string who = launcher_name(env.launcher);
  auto check = [&](const char* what, int theirs, int mine, const char* mpi_source) {
    if (theirs >= 0 && theirs != mine)
      out.push_back(who + " says " + what + " " + std::to_string(theirs) + ", " + mpi_source +
                    " says " + std::to_string(mine));
  };
  if (env.launcher == Launcher::none) return out;
  check("rank", env.rank, world.rank, "MPI_Comm_rank");
  check("world size", env.size, world.size, "MPI_Comm_size");
  if (env.size > 1 && world.size == 1)
    out.push_back(
        "every task started as an MPI job of its own: with srun, pass --mpi=pmix; with "
        "mpirun, use the mpirun of the MPI library Lockstep was built with");
  check("local rank", env.local_rank, world.local_rank, "MPI_Comm_split_type");
  check("ranks on this host", env.local_size, world.local_size, "MPI_Comm_split_type");
  return out;
}

GpuSlot gpu_slot(const std::vector<std::optional<std::string>>& visible_by_local_rank,
                 int local_rank) {
  if (local_rank < 0 || local_rank >= static_cast<int>(visible_by_local_rank.size())) return {};
  const auto& mine = visible_by_local_rank[static_cast<size_t>(local_rank)];
  GpuSlot slot{0, 0};
  for (int i = 0; i < static_cast<int>(visible_by_local_rank.size()); ++i) {
    if (visible_by_local_rank[static_cast<size_t>(i)] != mine) continue;
    ++slot.peers;
    if (i < local_rank) ++slot.index;
  }
  return slot;
}

GpuSlot gpu_slot(const World& world) {
  if (world.gpu_peers <= 0) return {world.local_rank, world.local_size};
  return {world.gpu_index, world.gpu_peers};
}

namespace {

// CUDA_VISIBLE_DEVICES of every rank on this host, in local-rank order. Collective.
std::vector<std::optional<std::string>> gather_local_visible(const World& world) {
  const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES");
  std::string mine = cvd ? cvd : "";
  MPI_Comm local = MPI_COMM_NULL;
  LS_CHECK_MPI(
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world.rank, MPI_INFO_NULL, &local));
  int n = 0;
  LS_CHECK_MPI(MPI_Comm_size(local, &n));
  // Length -1 marks "unset", which is not the same as set to "" (no GPU at all).
  int my_len = cvd ? static_cast<int>(mine.size()) : -1;
  std::vector<int> lens(static_cast<size_t>(n));
  LS_CHECK_MPI(MPI_Allgather(&my_len, 1, MPI_INT, lens.data(), 1, MPI_INT, local));
  std::vector<int> counts(static_cast<size_t>(n)), offsets(static_cast<size_t>(n));
  int total = 0;
  for (int i = 0; i < n; ++i) {
    counts[static_cast<size_t>(i)] = std::max(lens[static_cast<size_t>(i)], 0);
    offsets[static_cast<size_t>(i)] = total;
    total += counts[static_cast<size_t>(i)];
  }
  std::string all(static_cast<size_t>(total) + 1, '\0');
  LS_CHECK_MPI(MPI_Allgatherv(mine.data(), std::max(my_len, 0), MPI_CHAR, all.data(), counts.data(),
                              offsets.data(), MPI_CHAR, local));
  MPI_Comm_free(&local);
  std::vector<std::optional<std::string>> out;
  for (int i = 0; i < n; ++i) {
    if (lens[static_cast<size_t>(i)] < 0)
      out.emplace_back(std::nullopt);
    else
      out.emplace_back(all.substr(static_cast<size_t>(offsets[static_cast<size_t>(i)]),
                                  static_cast<size_t>(counts[static_cast<size_t>(i)])));
  }
  return out;
}

}  // namespace

void check_launch_env(World* world, Communicator& world_comm) {
  LaunchEnv env = detect_launch_env(process_env());
  auto visible = gather_local_visible(*world);
  GpuSlot slot = gpu_slot(visible, world->local_rank);
  world->gpu_index = slot.index;
  world->gpu_peers = slot.peers;

  // Tasks that each started as an MPI job of their own would train N copies side by side, each
  // rank 0, writing the same checkpoints and metrics: an error, not a warning.
  if (env.size > 1 && world->size == 1)
    throw UsageError(std::string(launcher_name(env.launcher)) + " started " +
                     std::to_string(env.size) +
                     " tasks, but this one is an MPI job of its own (MPI_Comm_size is 1), so " +
                     std::to_string(env.size) +
                     " independent trainings would write the same "
                     "files: with srun, pass --mpi=pmix (srun --mpi=list shows what this Slurm "
                     "offers); with mpirun, use the mpirun of the MPI library Lockstep was built "
                     "with");
  std::vector<std::string> issues = disagreements(env, *world);
  issues.insert(issues.end(), env.problems.begin(), env.problems.end());
  // Rank 0 reports the first rank with an issue and how many there are, so a problem on any rank
  // is seen once rather than lost (only rank 0 prints warnings). A warning, not an error: MPI wins.
  const std::optional<FirstProblem> first =
      first_problem(world_comm, issues.empty(), join(issues, "; "));

  std::ostringstream summary;
  summary << "launcher: " << describe(env);
  if (env.launcher != Launcher::none || world->size > 1 || !env.slurm_job_id.empty())
    summary << "; MPI: " << world->size << " rank(s), " << world->local_size
            << " on this host; GPU slot " << slot.index << " of " << slot.peers
            << " rank(s) seeing these GPUs";
  // What the launcher left this rank to run on: a binding narrower than asked for (srun without
  // --cpus-per-task since Slurm 22.05) shows here.
  summary << "; " << usable_cores() << " usable cores";
  world->launch_summary = summary.str();
  LS_LOG(debug) << world->launch_summary;
  if (first) {
    LS_LOG(warn) << "launch environment and MPI disagree on " << first->ranks << " rank(s); rank "
                 << first->rank << ": " << first->message << ". Using MPI's numbering.";
  }
}

}  // namespace lockstep
