// Launch environment detection over synthetic environments of each launcher, the GPU slot rule,
// and the start-up cross-check against MPI's numbering.
#include "runtime/process/launch_env.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "runtime/base/error.h"
#include "runtime/process/device.h"

using namespace lockstep;

namespace {

World world_of(int rank, int size, int local_rank, int local_size) {
  World w;
  w.rank = rank;
  w.size = size;
  w.local_rank = local_rank;
  w.local_size = local_size;
  w.host = "node";
  return w;
}

// Sets environment variables for one test and restores the previous values afterwards.
class ScopedEnv {
 public:
  void set(const std::string& key, const char* value) {
    const char* old = std::getenv(key.c_str());
    saved_.emplace(key, old ? std::optional<std::string>(old) : std::nullopt);
    if (value)
      setenv(key.c_str(), value, 1);
    else
      unsetenv(key.c_str());
  }
  ~ScopedEnv() {
    for (const auto& [key, value] : saved_) {
      if (value)
        setenv(key.c_str(), value->c_str(), 1);
      else
        unsetenv(key.c_str());
    }
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

}  // namespace

TEST(LaunchEnv, NoLauncher) {
  LaunchEnv e = detect_launch_env({{"HOME", "/root"}});
  EXPECT_EQ(Launcher::none, e.launcher);
  EXPECT_EQ(-1, e.rank);
  EXPECT_EQ(-1, e.local_rank);
  EXPECT_FALSE(e.visible_gpus.has_value());
  EXPECT_TRUE(e.problems.empty());
  EXPECT_TRUE(disagreements(e, world_of(0, 1, 0, 1)).empty());
}

TEST(LaunchEnv, OpenMpiMpirun) {
  LaunchEnv e = detect_launch_env({{"OMPI_COMM_WORLD_RANK", "5"},
                                   {"OMPI_COMM_WORLD_SIZE", "8"},
                                   {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                   {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
                                   {"PMIX_RANK", "5"}});
  EXPECT_EQ(Launcher::openmpi, e.launcher);
  EXPECT_EQ(5, e.rank);
  EXPECT_EQ(8, e.size);
  EXPECT_EQ(1, e.local_rank);
  EXPECT_EQ(4, e.local_size);
  EXPECT_TRUE(e.slurm_job_id.empty());
  EXPECT_TRUE(disagreements(e, world_of(5, 8, 1, 4)).empty());
}

TEST(LaunchEnv, MpirunInsideASlurmAllocationIsOpenMpi) {
  // The batch step's SLURM_* describe the batch script, not mpirun's ranks.
  LaunchEnv e = detect_launch_env({{"SLURM_JOB_ID", "42"},
                                   {"SLURM_PROCID", "0"},
                                   {"SLURM_LOCALID", "0"},
                                   {"SLURM_TASKS_PER_NODE", "4(x2)"},
                                   {"OMPI_COMM_WORLD_RANK", "6"},
                                   {"OMPI_COMM_WORLD_SIZE", "8"},
                                   {"OMPI_COMM_WORLD_LOCAL_RANK", "2"},
                                   {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}});
  EXPECT_EQ(Launcher::openmpi, e.launcher);
  EXPECT_EQ(6, e.rank);
  EXPECT_EQ(2, e.local_rank);
  EXPECT_EQ("42", e.slurm_job_id);
  EXPECT_NE(std::string::npos, describe(e).find("Slurm job 42"));
}

TEST(LaunchEnv, SrunTaskOnSecondNode) {
  LaunchEnv e = detect_launch_env({{"SLURM_JOB_ID", "7"},
                                   {"SLURM_STEP_ID", "0"},
                                   {"SLURM_PROCID", "3"},
                                   {"SLURM_LOCALID", "1"},
                                   {"SLURM_NODEID", "1"},
                                   {"SLURM_STEP_NUM_TASKS", "4"},
                                   {"SLURM_STEP_NUM_NODES", "2"},
                                   {"SLURM_STEP_TASKS_PER_NODE", "2(x2)"},
                                   {"SLURM_TASKS_PER_NODE", "4(x2)"},
                                   {"PMIX_RANK", "3"}});
  EXPECT_EQ(Launcher::slurm, e.launcher);
  EXPECT_EQ(3, e.rank);
  EXPECT_EQ(4, e.size);
  EXPECT_EQ(1, e.local_rank);
  EXPECT_EQ(2, e.local_size) << "the step's layout wins over the allocation's";
  EXPECT_EQ(1, e.node_index);
  EXPECT_EQ(2, e.node_count);
  EXPECT_EQ("7", e.slurm_job_id);
  EXPECT_EQ("0", e.slurm_step_id);
  std::string d = describe(e);
  EXPECT_NE(std::string::npos, d.find("slurm")) << d;
  EXPECT_NE(std::string::npos, d.find("node 1/2")) << d;
  EXPECT_NE(std::string::npos, d.find("local 1/2")) << d;
}

TEST(LaunchEnv, SrunUnevenNodesTakesThisNodesCount) {
  LaunchEnv e = detect_launch_env({{"SLURM_STEP_ID", "2"},
                                   {"SLURM_PROCID", "3"},
                                   {"SLURM_LOCALID", "0"},
                                   {"SLURM_NODEID", "1"},
                                   {"SLURM_TASKS_PER_NODE", "3,1"}});
  EXPECT_EQ(Launcher::slurm, e.launcher);
  EXPECT_EQ(1, e.local_size);
}

TEST(LaunchEnv, SrunFallsBackToNtasksPerNode) {
  LaunchEnv e = detect_launch_env({{"SLURM_STEPID", "0"},
                                   {"SLURM_PROCID", "1"},
                                   {"SLURM_LOCALID", "1"},
                                   {"SLURM_NTASKS_PER_NODE", "4"}});
  EXPECT_EQ(Launcher::slurm, e.launcher);
  EXPECT_EQ(4, e.local_size);
}

TEST(LaunchEnv, BatchScriptWithoutSrunIsNotASlurmLaunch) {
  // A program started by the batch script itself is one process, whatever the allocation holds.
  for (const char* step : {"", "batch"}) {
    EnvMap env{{"SLURM_JOB_ID", "9"},
               {"SLURM_PROCID", "0"},
               {"SLURM_LOCALID", "0"},
               {"SLURM_NODEID", "0"},
               {"SLURM_TASKS_PER_NODE", "2"}};
    if (*step) env["SLURM_STEP_ID"] = step;
    LaunchEnv e = detect_launch_env(env);
    EXPECT_EQ(Launcher::none, e.launcher) << "step '" << step << "'";
    EXPECT_EQ("9", e.slurm_job_id);
    EXPECT_TRUE(disagreements(e, world_of(0, 1, 0, 1)).empty());
  }
}

TEST(LaunchEnv, OpenMpiSingletonIsNoLauncher) {
  // Open MPI started without mpirun sets PMIX_RANK for itself.
  LaunchEnv e = detect_launch_env(
      {{"OMPI_MCA_ess", "singleton"}, {"PMIX_RANK", "0"}, {"PMIX_NAMESPACE", "1097072641"}});
  EXPECT_EQ(Launcher::none, e.launcher);
  EXPECT_EQ(-1, e.rank);
}

TEST(LaunchEnv, SrunWithoutPmixIsCaught) {
  // srun --mpi=none with Open MPI: each task initialises as a singleton, a world of one.
  LaunchEnv e = detect_launch_env({{"SLURM_STEP_ID", "0"},
                                   {"SLURM_PROCID", "1"},
                                   {"SLURM_LOCALID", "1"},
                                   {"SLURM_NODEID", "0"},
                                   {"SLURM_STEP_NUM_TASKS", "2"},
                                   {"SLURM_STEP_TASKS_PER_NODE", "2"},
                                   {"OMPI_MCA_ess", "singleton"},
                                   {"PMIX_RANK", "0"}});
  EXPECT_EQ(Launcher::slurm, e.launcher);
  auto d = disagreements(e, world_of(0, 1, 0, 1));
  ASSERT_FALSE(d.empty());
  bool hint = false;
  for (const auto& line : d) hint = hint || line.find("--mpi=pmix") != std::string::npos;
  EXPECT_TRUE(hint) << "no hint about srun --mpi=pmix";
}

TEST(LaunchEnv, MpichHydra) {
  LaunchEnv e = detect_launch_env(
      {{"PMI_RANK", "2"}, {"PMI_SIZE", "4"}, {"MPI_LOCALRANKID", "0"}, {"MPI_LOCALNRANKS", "2"}});
  EXPECT_EQ(Launcher::mpich, e.launcher);
  EXPECT_EQ(2, e.rank);
  EXPECT_EQ(4, e.size);
  EXPECT_EQ(0, e.local_rank);
  EXPECT_EQ(2, e.local_size);
}

TEST(LaunchEnv, OtherPmixLauncherGivesOnlyTheRank) {
  LaunchEnv e = detect_launch_env({{"PMIX_RANK", "1"}, {"PMIX_NAMESPACE", "prterun-x"}});
  EXPECT_EQ(Launcher::pmix, e.launcher);
  EXPECT_EQ(1, e.rank);
  EXPECT_EQ(-1, e.local_rank);
  EXPECT_TRUE(disagreements(e, world_of(1, 2, 0, 1)).empty()) << "unknown values are not checked";
}

TEST(LaunchEnv, MalformedValuesAreNamedNotTrusted) {
  LaunchEnv e = detect_launch_env({{"SLURM_STEP_ID", "0"},
                                   {"SLURM_PROCID", "1"},
                                   {"SLURM_LOCALID", "one"},
                                   {"SLURM_NODEID", "0"},
                                   {"SLURM_STEP_TASKS_PER_NODE", "2(x"}});
  EXPECT_EQ(Launcher::slurm, e.launcher);
  EXPECT_EQ(-1, e.local_rank);
  EXPECT_EQ(-1, e.local_size);
  ASSERT_EQ(2u, e.problems.size());
  EXPECT_NE(std::string::npos, e.problems[0].find("SLURM_LOCALID='one'")) << e.problems[0];
  EXPECT_NE(std::string::npos, e.problems[1].find("SLURM_STEP_TASKS_PER_NODE")) << e.problems[1];
  for (const char* bad : {"-1", "1x", "99999999999"})
    EXPECT_EQ(-1, detect_launch_env({{"OMPI_COMM_WORLD_RANK", bad}}).rank) << bad;
}

TEST(LaunchEnv, ExpandsSlurmTaskCounts) {
  EXPECT_EQ((std::vector<int>{2, 2, 2, 1}), expand_slurm_tasks_per_node("2(x3),1"));
  EXPECT_EQ((std::vector<int>{4}), expand_slurm_tasks_per_node("4"));
  EXPECT_EQ((std::vector<int>{1, 3, 3}), expand_slurm_tasks_per_node("1,3(x2)"));
  for (const char* bad : {"", "x", "2(x", "2(x0)", "2(xa)", "(x2)", "2,,b"})
    EXPECT_FALSE(expand_slurm_tasks_per_node(bad).has_value()) << "'" << bad << "'";
}

TEST(LaunchEnv, VisibleGpus) {
  EXPECT_FALSE(detect_launch_env({}).visible_gpus.has_value());
  auto none = detect_launch_env({{"CUDA_VISIBLE_DEVICES", ""}}).visible_gpus;
  ASSERT_TRUE(none.has_value()) << "set but empty means no GPU, not all GPUs";
  EXPECT_TRUE(none->empty());
  LaunchEnv e = detect_launch_env({{"CUDA_VISIBLE_DEVICES", "GPU-aa, GPU-bb"},
                                   {"SLURM_STEP_GPUS", "2,3"},
                                   {"SLURM_JOB_GPUS", "0,1,2,3"}});
  EXPECT_EQ((std::vector<std::string>{"GPU-aa", "GPU-bb"}), *e.visible_gpus);
  EXPECT_EQ((std::vector<std::string>{"2", "3"}), e.slurm_gpus);
  EXPECT_NE(std::string::npos, describe(e).find("CUDA_VISIBLE_DEVICES=GPU-aa,GPU-bb"));
}

TEST(LaunchEnv, DisagreementsNameBothSides) {
  LaunchEnv e = detect_launch_env({{"OMPI_COMM_WORLD_RANK", "1"},
                                   {"OMPI_COMM_WORLD_SIZE", "4"},
                                   {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                   {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
  EXPECT_TRUE(disagreements(e, world_of(1, 4, 1, 2)).empty());
  auto d = disagreements(e, world_of(1, 4, 0, 1));
  ASSERT_EQ(2u, d.size());
  EXPECT_EQ("openmpi says local rank 1, MPI_Comm_split_type says 0", d[0]);
  EXPECT_EQ("openmpi says ranks on this host 2, MPI_Comm_split_type says 1", d[1]);
}

TEST(GpuSlot, AllGpusVisibleToEveryRankFollowsLocalRank) {
  std::vector<std::optional<std::string>> unset(4);
  for (int r = 0; r < 4; ++r) {
    GpuSlot s = gpu_slot(unset, r);
    EXPECT_EQ(r, s.index);
    EXPECT_EQ(4, s.peers);
  }
  std::vector<std::optional<std::string>> same(4, std::string("0,1,2,3"));
  EXPECT_EQ(2, gpu_slot(same, 2).index);
}

TEST(GpuSlot, OneGpuPerTaskTakesIndexZero) {
  // Slurm --gpus-per-task=1: each task sees only its own GPU.
  std::vector<std::optional<std::string>> per_task{"0", "1", "2", "3"};
  for (int r = 0; r < 4; ++r) {
    GpuSlot s = gpu_slot(per_task, r);
    EXPECT_EQ(0, s.index);
    EXPECT_EQ(1, s.peers);
  }
}

TEST(GpuSlot, RanksSharingASetAreCountedTogether) {
  std::vector<std::optional<std::string>> pairs{"0,1", "0,1", "2,3", "2,3"};
  EXPECT_EQ(0, gpu_slot(pairs, 2).index);
  EXPECT_EQ(1, gpu_slot(pairs, 3).index);
  EXPECT_EQ(2, gpu_slot(pairs, 3).peers);
  // The same single GPU exported to every rank is shared, not private: 4 ranks compete for it.
  std::vector<std::optional<std::string>> one(4, std::string("0"));
  EXPECT_EQ(4, gpu_slot(one, 3).peers);
  EXPECT_EQ(3, gpu_slot(one, 3).index);
  // Unset (all GPUs) and set-but-empty (no GPU) are different sets.
  std::vector<std::optional<std::string>> mixed{std::nullopt, std::string("")};
  EXPECT_EQ(1, gpu_slot(mixed, 0).peers);
}

TEST(GpuSlot, WorldWithoutASlotUsesLocalRank) {
  World w = world_of(3, 4, 1, 2);
  EXPECT_EQ(1, gpu_slot(w).index);
  EXPECT_EQ(2, gpu_slot(w).peers);
  w.gpu_index = 0;
  w.gpu_peers = 1;
  EXPECT_EQ(0, gpu_slot(w).index);
  EXPECT_EQ(1, gpu_slot(w).peers);
}

TEST(GpuSlot, DeviceChoiceTakesIndexZeroOfAPerTaskGpu) {
  // Slurm --gpus-per-task=1 with 4 tasks on a node: every rank sees one GPU, its own.
  World w = world_of(3, 8, 3, 4);
  w.gpu_index = 0;
  w.gpu_peers = 1;
  DeviceChoice c = choose_device_given("cuda", w, 1, "");
  EXPECT_EQ(DeviceKind::cuda, c.kind);
  EXPECT_EQ(0, c.index);
  // The same single GPU exported to all 4 ranks, or per-task device cgroups where every task
  // reads "0": each rank takes index 0 of what it sees, and their UUIDs tell the two apart
  // (device_test: GpuSharing).
  w.gpu_index = 3;
  w.gpu_peers = 4;
  EXPECT_EQ(0, choose_device_given("cuda", w, 1, "").index);
}

namespace {

// This single process seen as srun's task: Open MPI's own variables unset, Slurm's job `job`, step
// 0, task `procid` at local id `localid` of 2 on node 0.
void as_srun_task(ScopedEnv& env, const char* job, const char* procid, const char* localid) {
  for (const char* k : {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK"}) env.set(k, nullptr);
  env.set("SLURM_JOB_ID", job);
  env.set("SLURM_STEP_ID", "0");
  env.set("SLURM_PROCID", procid);
  env.set("SLURM_LOCALID", localid);
  env.set("SLURM_NODEID", "0");
  env.set("SLURM_STEP_TASKS_PER_NODE", "2");
}

}  // namespace

TEST(CheckLaunchEnv, TasksThatStartedAsSingletonsAreAnError) {
  // srun started 2 tasks, but MPI says this one is a world of one (no working PMI): two
  // independent trainings would write the same checkpoint files.
  ScopedEnv env;
  as_srun_task(env, "78", "1", "1");
  env.set("SLURM_STEP_NUM_TASKS", "2");
  World w = discover_world();
  ASSERT_EQ(1, w.size) << "run this test as a single process";
  auto world_comm = make_mpi_communicator();
  try {
    check_launch_env(&w, *world_comm);
    ADD_FAILURE() << "2 srun tasks that each are an MPI job of one were accepted";
  } catch (const UsageError& e) {
    const std::string msg = e.what();
    EXPECT_NE(std::string::npos, msg.find("started 2 tasks")) << msg;
    EXPECT_NE(std::string::npos, msg.find("--mpi=pmix")) << msg;
  }
}

TEST(CheckLaunchEnv, WarnsWhenTheLauncherDisagreesWithMpi) {
  // This binary runs as one process; pretend srun said it was local rank 1 of 2.
  ScopedEnv env;
  as_srun_task(env, "77", "0", "1");
  env.set("CUDA_VISIBLE_DEVICES", "3");
  World w = discover_world();
  ASSERT_EQ(1, w.size) << "run this test as a single process";
  auto world_comm = make_mpi_communicator();
  testing::internal::CaptureStderr();
  check_launch_env(&w, *world_comm);
  std::string err = testing::internal::GetCapturedStderr();
  // The launcher line is kept for --verbose, not printed at the default level: start-up is quiet.
  EXPECT_NE(std::string::npos, w.launch_summary.find("launcher: slurm (Slurm job 77 step 0"))
      << w.launch_summary;
  EXPECT_EQ(std::string::npos, err.find("launcher:")) << err;
  EXPECT_NE(std::string::npos, err.find("disagree on 1 rank(s)")) << err;
  EXPECT_NE(std::string::npos, err.find("slurm says local rank 1, MPI_Comm_split_type says 0"))
      << err;
  EXPECT_EQ(0, w.gpu_index);
  EXPECT_EQ(1, w.gpu_peers);
}

TEST(CheckLaunchEnv, QuietWhenTheyAgree) {
  ScopedEnv env;
  for (const char* k : {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_STEP_ID",
                        "SLURM_STEPID", "PMI_RANK"})
    env.set(k, nullptr);
  World w = discover_world();
  auto world_comm = make_mpi_communicator();
  testing::internal::CaptureStderr();
  check_launch_env(&w, *world_comm);
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(std::string::npos, err.find("disagree")) << err;
}
