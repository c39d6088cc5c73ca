// What lockstep-train prints when a run ends: the step-time breakdown (stderr) and the final
// figures as key=value lines on stdout, test_loss and test_accuracy last, so scripts can read them
// (`grep ^test_accuracy=`). For regression files that carry the true model (lockstep-data
// regression writes true_w and true_b as root attributes) and a single dense layer, the distance
// of the learned w and b from the truth is printed too; for byte-level tokens (a language model's
// per-token loss), test_bits_per_byte before test_loss. Rank 0 only; main thread.
#pragma once

#include "runtime/train/trainer.h"

namespace lockstep {

// The run's header on stderr; with evaluate_only (--eval-only) its data line names the split
// evaluated and the batch line the evaluation's batch.
void print_run_header(Trainer& trainer, int world_size, const char* device, const char* comm,
                      int blas_threads, bool evaluate_only = false);
void print_final_report(Trainer& trainer, const TrainResult& result);
// The evaluation's figures alone, as the final report ends (--eval-only prints just these).
void print_test_figures(Trainer& trainer, const EvalResult& test);

}  // namespace lockstep
