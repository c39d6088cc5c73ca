// The trainer's test hooks: faults that the multi-rank tests inject on one rank, read once from
// the environment when a Trainer is made (LOCKSTEP_TEST_*; unset: inert). Each names the rank it
// acts on, so the same environment can reach every rank of a job. Plain data, read by the
// training thread; no collective calls.
#pragma once

#include <cstdint>

namespace lockstep {

struct TrainTestHooks {
  // LOCKSTEP_TEST_CAPTURE_FAIL_RANK=r: rank r's capture of the step in a CUDA graph throws.
  int capture_fail_rank = -1;
  // LOCKSTEP_TEST_LOSS_INF=r:s: rank r's loss at (1-based) step s becomes +Inf, its gradient
  // untouched (Step::poison_loss).
  int inf_loss_rank = -1;
  int64_t inf_loss_step = -1;
  // LOCKSTEP_TEST_DELAY_FIRST_BATCH=r:ms: rank r's first step of the run sleeps ms milliseconds
  // before its first batch, as a rank slow to read a large split would.
  int delay_rank = -1;
  int64_t delay_ms = -1;
  // LOCKSTEP_TEST_LAUNCH_FAULT=s: at (1-based) step s, replayed from a CUDA graph, rank 0 sleeps
  // 30 s before its launch and rank 1 throws just after its own: rank 1 unwinds with its replay in
  // flight, its collectives waiting for a peer that has not launched.
  int64_t launch_fault_step = -1;

  static TrainTestHooks from_environment();
};

}  // namespace lockstep
