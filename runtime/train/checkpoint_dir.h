// The --checkpoint-dir of a run, checked before training: it must be creatable and writable, and
// checkpoints already in it are another run's (or this run's earlier life) that a fresh run would
// silently mix with or replace (a new ckpt-000000010.h5 beside an old ckpt-000000500.h5 loses to
// it in --resume and in pruning). So a fresh run refuses them, naming the files; --resume keeps
// them (the run continues where they end); --overwrite-checkpoints deletes them first.
// Used by the training thread.
// Collective: every rank calls prepare_checkpoint_dir at the same point.
#pragma once

#include "runtime/base/communicator.h"
#include "runtime/train/step_guard.h"

namespace lockstep {

// Collective: rank 0 creates o.checkpoint_dir, checks that it is writable and applies
// o.existing to the checkpoints in it; every rank throws the same UsageError when it refuses.
// Nothing to do without a checkpoint folder.
void prepare_checkpoint_dir(const GuardOptions& o, Communicator& comm);

}  // namespace lockstep
