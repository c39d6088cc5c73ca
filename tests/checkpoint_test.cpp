// Checkpoint files: an exact round trip, keep-last-K, a save killed before its rename, and a clear
// refusal (UsageError naming the file and the problem) for every kind of bad file; plus the stop
// flag that SIGTERM/SIGINT/SIGUSR1 set.
#include "runtime/train/checkpoint.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <hdf5.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "runtime/base/error.h"
#include "runtime/process/signals.h"
#include "runtime/train/checkpoint_dir.h"
#include "runtime/train/checkpoint_io.h"
#include "solo_communicator.h"
#include "test_util.h"

using namespace lockstep;
namespace fs = std::filesystem;

namespace {

CheckpointState sample_state(int64_t step) {
  CheckpointState s;
  s.model_spec = "mlp:4";
  s.config = "lr=0.1\nglobal_batch=8\n";
  s.world_size = 4;
  s.epoch = 2;
  s.step_in_epoch = 3;
  s.global_step = step;
  s.seed = 0xfeedfacecafebeefull;
  s.rng_state = {1, 0xffffffffffffffffull, 42};
  // Values whose bits a sloppy round trip would change: -0, a denormal, the extremes.
  s.params.push_back({"dense0.weight",
                      {2, 3},
                      {-0.0f, std::numeric_limits<float>::denorm_min(), 1e-30f, 3.4e38f, -1.5f,
                       static_cast<float>(step)}});
  s.params.push_back({"dense0.bias", {3}, {0.25f, -0.5f, 1.0f}});
  s.params.push_back({"head/dense1.weight", {3, 1}, {7.0f, 8.0f, 9.0f}});
  s.optimizer.push_back({"velocity/dense0.weight", {2, 3}, {1, 2, 3, 4, 5, 6}});
  s.optimizer.push_back({"velocity/dense0.bias", {3}, {0, 0, 0}});
  s.optimizer.push_back({"velocity/head/dense1.weight", {3, 1}, {-1, -2, -3}});
  s.scalars["optimizer_step"] = static_cast<double>(step);
  s.scalars["loss_scale"] = 0.5;
  return s;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void expect_same(const CheckpointState& a, const CheckpointState& b) {
  EXPECT_EQ(a.format_version, b.format_version);
  EXPECT_EQ(a.model_spec, b.model_spec);
  EXPECT_EQ(a.config, b.config);
  EXPECT_EQ(a.world_size, b.world_size);
  EXPECT_EQ(a.epoch, b.epoch);
  EXPECT_EQ(a.step_in_epoch, b.step_in_epoch);
  EXPECT_EQ(a.global_step, b.global_step);
  EXPECT_EQ(a.seed, b.seed);
  EXPECT_EQ(a.rng_state, b.rng_state);
  EXPECT_EQ(a.scalars, b.scalars);
  for (auto [x, y] : {std::pair{&a.params, &b.params}, std::pair{&a.optimizer, &b.optimizer}}) {
    ASSERT_EQ(x->size(), y->size());
    for (size_t i = 0; i < x->size(); ++i) {
      EXPECT_EQ((*x)[i].name, (*y)[i].name);
      EXPECT_EQ((*x)[i].shape, (*y)[i].shape);
      EXPECT_TRUE(same_bits((*x)[i].data, (*y)[i].data)) << (*x)[i].name;
    }
  }
}

// Loads `path` expecting a refusal whose message names the file and contains `words`.
void expect_refused(const std::string& path, const std::string& words) {
  try {
    load_checkpoint(path);
    ADD_FAILURE() << "loaded " << path << " although it should be refused (" << words << ")";
  } catch (const UsageError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find(words), std::string::npos) << msg;
  }
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// The byte offset of a dataset's values in the file.
uint64_t data_offset(const std::string& path, const char* dataset) {
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t d = H5Dopen2(f, dataset, H5P_DEFAULT);
  haddr_t at = H5Dget_offset(d);
  H5Dclose(d);
  H5Fclose(f);
  return at;
}

}  // namespace

TEST(Checkpoint, RoundTripIsExact) {
  std::string dir = testing_util::local_temp_dir("ckpt-roundtrip");
  CheckpointState s = sample_state(17);
  std::string path = save_checkpoint(dir, s, 0);
  EXPECT_EQ(path, dir + "/ckpt-000000017.h5");
  expect_same(s, load_checkpoint(path));
  expect_same(s, load_checkpoint(dir));  // a folder means its newest checkpoint
}

TEST(Checkpoint, FolderResolvesToNewestAndKeepsLastK) {
  std::string dir = testing_util::local_temp_dir("ckpt-keep");
  for (int64_t step : {5, 10, 100, 20, 1000}) save_checkpoint(dir, sample_state(step), 3);
  std::vector<std::string> left = list_checkpoints(dir);
  ASSERT_EQ(left.size(), 3u);
  EXPECT_EQ(left[0], checkpoint_file_name(dir, 20));
  EXPECT_EQ(left[2], checkpoint_file_name(dir, 1000));
  EXPECT_EQ(load_checkpoint(dir).global_step, 1000);
  save_checkpoint(dir, sample_state(1001), 0);  // keep <= 0: keep all
  EXPECT_EQ(list_checkpoints(dir).size(), 4u);
}

TEST(Checkpoint, SaveKilledBeforeRenameLeavesPreviousCheckpoint) {
  std::string dir = testing_util::local_temp_dir("ckpt-atomic");
  save_checkpoint(dir, sample_state(10), 2);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    setenv(kCrashInSaveEnv, "20", 1);
    save_checkpoint(dir, sample_state(20), 2);
    _exit(0);  // not reached: the hook kills the process
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;
  EXPECT_TRUE(fs::exists(dir + "/.ckpt-000000020.h5.tmp")) << "the hook fired before the write";
  EXPECT_EQ(list_checkpoints(dir), std::vector<std::string>{checkpoint_file_name(dir, 10)});
  expect_same(sample_state(10), load_checkpoint(dir));
  // The next save cleans up the orphan.
  save_checkpoint(dir, sample_state(30), 2);
  EXPECT_FALSE(fs::exists(dir + "/.ckpt-000000020.h5.tmp"));
}

TEST(Checkpoint, NeverWritesNonFiniteParameters) {
  std::string dir = testing_util::local_temp_dir("ckpt-nan");
  save_checkpoint(dir, sample_state(1), 0);
  CheckpointState bad = sample_state(2);
  bad.params[1].data[2] = std::nanf("");
  try {
    save_checkpoint(dir, bad, 0);
    ADD_FAILURE() << "a NaN parameter was saved";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("dense0.bias"), std::string::npos) << e.what();
  }
  bad.params[1].data[2] = 1.0f;
  bad.optimizer[0].data[0] = -INFINITY;
  EXPECT_THROW(save_checkpoint(dir, bad, 0), Error);
  EXPECT_EQ(list_checkpoints(dir).size(), 1u);
  EXPECT_EQ(load_checkpoint(dir).global_step, 1);
}

// A NaN under a valid CRC32 (written past save_checkpoint's check, as an edited file would be) is
// refused on reading, naming the tensor; the header alone still reads (what the run was).
TEST(Checkpoint, RefusesNonFiniteValuesUnderAValidCrc) {
  std::string dir = testing_util::local_temp_dir("ckpt-nan-read");
  CheckpointState bad = sample_state(2);
  bad.params[1].data[2] = std::nanf("");
  const std::string path = checkpoint_file_name(dir, 2);
  detail::write_checkpoint_h5(path, bad);
  try {
    load_checkpoint(path);
    ADD_FAILURE() << "a checkpoint holding a NaN parameter was loaded";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("/params/dense0.bias holds a non-finite value"),
              std::string::npos)
        << e.what();
  }
  const CheckpointState header = load_checkpoint_header(path);
  EXPECT_EQ(header.global_step, 2);
  EXPECT_EQ(header.config, bad.config);
  EXPECT_TRUE(header.params.empty());
}

TEST(Checkpoint, RefusesMissingPathsAndEmptyFolders) {
  std::string dir = testing_util::local_temp_dir("ckpt-missing");
  expect_refused(dir + "/nope.h5", "does not exist");
  expect_refused(dir, "no checkpoint in folder");
}

TEST(Checkpoint, RefusesTruncatedGarbageAndNonCheckpointFiles) {
  std::string dir = testing_util::local_temp_dir("ckpt-bad");
  std::string good = save_checkpoint(dir, sample_state(3), 0);
  std::string bytes = read_bytes(good);
  for (size_t keep : {bytes.size() / 2, bytes.size() - 1, size_t{100}, size_t{0}}) {
    std::string path = dir + "/truncated-" + std::to_string(keep) + ".h5";
    write_bytes(path, bytes.substr(0, keep));
    expect_refused(path, "cannot be used");
  }
  write_bytes(dir + "/garbage.h5", std::string(5000, 'x'));
  expect_refused(dir + "/garbage.h5", "not an HDF5 file");
  // A valid HDF5 file that is not a checkpoint (e.g. a dataset passed by mistake).
  hid_t f = H5Fcreate((dir + "/data.h5").c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  H5Gclose(H5Gcreate2(f, "train", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  H5Fclose(f);
  expect_refused(dir + "/data.h5", "not a Lockstep checkpoint");
}

TEST(Checkpoint, OneOpenForWritingElsewhereIsNamedAsSuch) {
  // HDF5 locks a file it opens; a writer elsewhere (h5py's 'a' mode) holds it exclusively, which
  // an exclusive flock on another descriptor of the file stands in for here.
  std::string dir = testing_util::local_temp_dir("ckpt-locked");
  std::string path = save_checkpoint(dir, sample_state(4), 0);
  const int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(0, ::flock(fd, LOCK_EX));
  expect_refused(path, "another process has it open for writing");
  ::close(fd);  // the lock goes with it
  expect_same(sample_state(4), load_checkpoint(path));
}

TEST(CheckpointDir, ASecondRunOnTheSameFolderIsRefusedWhileTheFirstLasts) {
  // Two processes, as two jobs given one --checkpoint-dir would be: the child takes the folder and
  // holds it until told to let go; the parent's run is refused meanwhile, naming the child.
  GuardOptions o;
  o.checkpoint_dir = testing_util::local_temp_dir("ckpt-dir-lock") + "/ck";
  int held[2], release[2];
  ASSERT_EQ(0, ::pipe(held));
  ASSERT_EQ(0, ::pipe(release));
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    testing_util::SoloCommunicator solo;
    CheckpointDirLock lock = prepare_checkpoint_dir(o, solo);
    char c = lock.held() ? 'y' : 'n';
    if (::write(held[1], &c, 1) != 1 || ::read(release[0], &c, 1) != 1) _exit(3);
    _exit(0);  // the lock goes with the process
  }
  char c = 0;
  ASSERT_EQ(1, ::read(held[0], &c, 1));
  ASSERT_EQ('y', c) << "the first run did not take the folder's lock";
  testing_util::SoloCommunicator solo;
  const std::string refusal = testing_util::usage_message(
      [&] { CheckpointDirLock second = prepare_checkpoint_dir(o, solo); });
  EXPECT_NE(refusal.find("--checkpoint-dir " + o.checkpoint_dir +
                         " is in use by another run (pid " + std::to_string(child) + " on host "),
            std::string::npos)
      << refusal;
  c = 'x';
  ASSERT_EQ(1, ::write(release[1], &c, 1));
  int status = 0;
  ASSERT_EQ(child, waitpid(child, &status, 0));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  // Once it has ended (however: the kernel drops the lock), the folder is free again.
  CheckpointDirLock lock = prepare_checkpoint_dir(o, solo);
  EXPECT_TRUE(lock.held());
  for (int fd : {held[0], held[1], release[0], release[1]}) ::close(fd);
}

TEST(Checkpoint, RefusesUnknownFormatVersion) {
  std::string dir = testing_util::local_temp_dir("ckpt-version");
  CheckpointState s = sample_state(4);
  s.format_version = kCheckpointFormatVersion + 1;
  std::string path = save_checkpoint(dir, s, 0);
  expect_refused(
      path, "format version " + std::to_string(kCheckpointFormatVersion + 1) + " is not supported");
}

TEST(Checkpoint, RefusesMissingDatasets) {
  std::string dir = testing_util::local_temp_dir("ckpt-dataset");
  for (const char* victim :
       {"params/dense0.bias", "optimizer/velocity/head/dense1.weight", "rng"}) {
    std::string path = save_checkpoint(dir, sample_state(5), 0);
    hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(H5Ldelete(f, victim, H5P_DEFAULT), 0);
    H5Fclose(f);
    {
      std::string v = victim;
      expect_refused(path, v.substr(v.rfind('/') + 1) + " is missing");
    }
  }
}

TEST(Checkpoint, RefusesFlippedValues) {
  std::string dir = testing_util::local_temp_dir("ckpt-flip");
  std::string path = save_checkpoint(dir, sample_state(6), 0);
  uint64_t at = data_offset(path, "params/dense0.weight");
  std::string bytes = read_bytes(path);
  ASSERT_LT(at + 8, bytes.size());
  bytes[at + 5] ^= 0x10;  // one bit of the second value
  write_bytes(path, bytes);
  expect_refused(path, "dense0.weight is corrupt");
}

// Whatever byte is damaged, a load either refuses with a UsageError or (damage in unused space)
// returns the state that was saved: never a crash, never silently different values.
TEST(Checkpoint, AnyDamagedByteIsRefusedOrHarmless) {
  std::string dir = testing_util::local_temp_dir("ckpt-fuzz");
  CheckpointState s = sample_state(7);
  std::string good = save_checkpoint(dir, s, 0);
  const std::string bytes = read_bytes(good);
  std::string path = dir + "/damaged.h5";
  int refused = 0, harmless = 0;
  for (size_t i = 0; i < bytes.size(); i += 7) {
    std::string damaged = bytes;
    damaged[i] = static_cast<char>(damaged[i] ^ 0x5a);
    write_bytes(path, damaged);
    try {
      CheckpointState back = load_checkpoint(path);
      expect_same(s, back);
      ++harmless;
    } catch (const UsageError&) {
      ++refused;
    }
    if (HasFailure())
      FAIL() << "damage at byte " << i << " of " << bytes.size() << " went unnoticed";
  }
  EXPECT_GT(refused, 0);
  std::printf("damaged bytes: %d refused, %d in unused space\n", refused, harmless);
}

TEST(Checkpoint, CompatibilityNamesTheMismatch) {
  CheckpointState s = sample_state(8);
  CheckpointExpectation want;
  want.model_spec = s.model_spec;
  for (const auto& t : s.params) want.params.push_back({t.name, t.shape, {}});
  for (const auto& t : s.optimizer) want.optimizer.push_back({t.name, t.shape, {}});
  want.scalars = {"optimizer_step"};
  EXPECT_NO_THROW(check_compatible(s, want, "x.h5"));

  auto refusal = [&](const CheckpointExpectation& w) -> std::string {
    try {
      check_compatible(s, w, "x.h5");
    } catch (const UsageError& e) {
      return e.what();
    }
    return "(accepted)";
  };
  CheckpointExpectation w = want;
  w.model_spec = "cnn";
  EXPECT_NE(refusal(w).find("written for model 'mlp:4', this run's model is 'cnn'"),
            std::string::npos);
  w = want;
  w.params[0].shape = {3, 3};
  EXPECT_NE(
      refusal(w).find("dense0.weight has shape (2, 3) in the checkpoint, the model needs (3, 3)"),
      std::string::npos)
      << refusal(w);
  w = want;
  w.params.push_back({"dense2.weight", {1}, {}});
  EXPECT_NE(refusal(w).find("dense2.weight is missing"), std::string::npos) << refusal(w);
  w = want;
  w.params.pop_back();
  EXPECT_NE(refusal(w).find("head/dense1.weight, which the model lacks"), std::string::npos)
      << refusal(w);
  w = want;
  w.optimizer.clear();  // e.g. resumed with plain SGD after momentum
  EXPECT_NE(refusal(w).find("optimizer buffer velocity/dense0.weight"), std::string::npos)
      << refusal(w);
  w = want;
  w.scalars.push_back("adam_step");
  EXPECT_NE(refusal(w).find("adam_step"), std::string::npos) << refusal(w);
}

TEST(Signals, StopSignalsSetTheFlag) {
  install_stop_handlers();
  clear_stop_request();
  EXPECT_FALSE(stop_requested());
  for (int sig : {SIGTERM, SIGINT, SIGUSR1}) {
    std::raise(sig);  // would end the process without the handler
    EXPECT_TRUE(stop_requested());
    EXPECT_EQ(stop_signal(), sig);
    clear_stop_request();
  }
  EXPECT_STREQ(signal_name(SIGTERM), "SIGTERM");
}

TEST(Signals, SecondSameSignalEndsTheProcess) {
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    install_stop_handlers();
    clear_stop_request();
    std::raise(SIGINT);
    std::raise(SIGINT);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGINT) << "status " << status;
}
