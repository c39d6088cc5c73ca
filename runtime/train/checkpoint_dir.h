// The --checkpoint-dir of a run, checked before training: it must be creatable and writable, and
// checkpoints already in it are another run's (or this run's earlier life) that a fresh run would
// silently mix with or replace (a new ckpt-000000010.h5 beside an old ckpt-000000500.h5 loses to
// it in --resume and in pruning). So a fresh run refuses them, naming the files; --resume keeps
// them (the run continues where they end); --overwrite-checkpoints deletes them first.
// Two runs given the same folder at the same time (a job submitted twice, an array whose tasks
// share it) would overwrite and prune each other's checkpoints: rank 0 holds a lock on
// D/.lockstep.lock (fcntl, which NFS carries) while its run lasts, and a second run is refused,
// naming the holder (pid, host, start) written in the file. The kernel drops the lock when the
// process ends however it ends, so a crashed run never leaves its folder locked. Where the file
// system takes no locks a line says so and the run goes on.
// Used by the training thread.
// Collective: every rank calls prepare_checkpoint_dir at the same point.
#pragma once

#include "runtime/base/communicator.h"
#include "runtime/train/step_guard.h"

namespace lockstep {

// Rank 0's lock on its checkpoint folder, released when destroyed (an empty one on other ranks,
// and without a folder). Move-only.
class CheckpointDirLock {
 public:
  CheckpointDirLock() = default;
  explicit CheckpointDirLock(int fd) : fd_(fd) {}
  CheckpointDirLock(CheckpointDirLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  CheckpointDirLock& operator=(CheckpointDirLock&& other) noexcept;
  CheckpointDirLock(const CheckpointDirLock&) = delete;
  CheckpointDirLock& operator=(const CheckpointDirLock&) = delete;
  ~CheckpointDirLock();
  bool held() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// Collective: rank 0 creates o.checkpoint_dir, checks that it is writable, takes its lock (above)
// and applies o.existing to the checkpoints in it; every rank throws the same UsageError when it
// refuses. Nothing to do without a checkpoint folder. Keep what it returns while the run lasts.
[[nodiscard]] CheckpointDirLock prepare_checkpoint_dir(const GuardOptions& o, Communicator& comm);

}  // namespace lockstep
