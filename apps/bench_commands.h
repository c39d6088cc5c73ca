// The subcommands of lockstep-bench, one function each. bench_main.cpp dispatches on the first
// word of the command line and hands the function the words from its name on (argv[0] is the
// subcommand's name) plus the World from run_app. A subcommand runs on every rank, prints its
// results on rank 0 (stdout), and returns the process's exit status. Bad options throw UsageError:
// every rank parses the same words, so every rank throws and leaves together. Main thread only.
//
// Adding a subcommand: declare it here, define it in apps/bench_<name>.cpp (globbed into the
// executable), and add one row to kCommands in bench_main.cpp.
#pragma once

#include "runtime/process/bootstrap.h"

namespace lockstep::bench {

// nccl-tests style bandwidth tables for every collective and backend (bench_collectives.cpp).
int run_collectives_bench(int argc, char** argv, const World& world);

// Communicator::all_reduce against a plain MPI_Allreduce, interleaved (bench_overhead.cpp).
int run_overhead_bench(int argc, char** argv, const World& world);

// A GPT's matrix products one at a time against the peak, and in bf16 cuBLASLt's algorithms for
// each (bench_gemm.cpp).
int run_gemm_bench(int argc, char** argv, const World& world);

// Training-step throughput, phase shares and FLOP/s against a measured sgemm peak
// (bench_train.cpp).
int run_train_bench(int argc, char** argv, const World& world);

}  // namespace lockstep::bench
