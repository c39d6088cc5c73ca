// lockstep-train's options: Boost.Program_options over the command line and an optional INI file
// (--config FILE: "key = value" lines with the long option names; the command line wins). One
// table drives --help, parsing and defaults: TrainConfig's rows (runtime/train/config_table.h) and
// the rows of what the program itself uses (device, communicator, threads, ...), which live in
// train_options.cpp with their defaults here. Every value a user can get wrong is checked by its
// row or by validate(TrainConfig), and the message names the option. Main thread only.
#pragma once

#include <boost/program_options.hpp>
#include <string>
#include <vector>

#include "runtime/train/train_config.h"

namespace lockstep {

struct TrainOptions {
  TrainConfig config;
  std::string data;             // as given: a file, or a dataset name
  std::string device = "auto";  // cpu | cuda | auto
  std::string comm = "auto";    // auto | mpi | nccl
  double timeout_seconds = 60;
  double startup_timeout_seconds = 600;  // one-off start-up work across ranks (at least timeout)
  std::string resume;                    // --resume: a checkpoint file or folder
  bool eval_only = false;      // --eval-only: evaluate the --resume checkpoint, train nothing
  std::string unused_outputs;  // --eval-only: the output options given, which it does not use
  bool overwrite_checkpoints = false;  // a fresh run deletes the checkpoints already there
  int threads = 0;                     // BLAS threads per rank; 0: cores / ranks on the host
  std::string progress = "auto";       // auto | bar | lines | none
  std::string trace;                   // --trace: Chrome trace-event JSON of every rank (trace.h)
  bool verbose = false;                // --verbose: debug logging, the launcher line included
  bool help = false;
  bool version = false;   // --version: print version_text (runtime/base/build_info.h) and exit
  std::string help_text;  // every option with its default
  std::vector<std::string> given;  // the options set on the command line or in --config, by name
};

// Throws UsageError naming the option (or the config file) on anything it cannot accept. --help
// and the errors name the program as argv[0]'s file name (a user's program that calls train_main).
TrainOptions parse_train_options(int argc, char** argv);

// --eval-only: what the checkpoint's run recorded (`record`, CheckpointState::config) for the
// options the evaluation needs to build its model and read the checkpoint (--model, --loss,
// --optimizer, --seed) and for its figures to be the run's (--eval-steps), where not given; one
// micro-batch (unless --grad-accum is given) of, unless --global-batch is given, the run's rows
// per step rounded down to a multiple of the `world_size` ranks (it only groups the test rows).
// Throws UsageError for a recorded value its row refuses.
void adopt_checkpoint_options(TrainOptions& o, const std::string& record, int world_size);

// --eval-only reads the --test-group split alone (it becomes the trainer's only split, so a file
// without a training split evaluates, and nothing else is read or held), and, unless
// --global-batch is given, cuts the batch to that split's rows (a multiple of the ranks) when the
// run's batch is larger. Opens the file (every rank); throws UsageError as the data checks do.
void evaluate_test_split_only(TrainOptions& o, int world_size);
// --resume (training): the checkpoint's run's options (`record`) where not given, so a resumed run
// continues that run: its model, loss, optimizer and hyper-parameters, batch, seed, remainder and
// length (--steps and --epochs both, unless either is given); not its data, groups or --zero.
// Returns the options taken, "--model mlp:8, --lr 0.001", empty when none. Throws UsageError for
// a recorded value its row refuses.
std::string adopt_resumed_options(TrainOptions& o, const std::string& record);

// Another program's options that are lockstep-train's (lockstep-bench train): each named row
// added to `desc` with lockstep-train's help and default, and set from `vm` by the same row, so
// both programs take and refuse the same values in the same words. A name that is no
// lockstep-train option is a programming error (std::logic_error).
void add_train_options(boost::program_options::options_description& desc,
                       const std::vector<std::string>& names);
void set_train_options(const boost::program_options::variables_map& vm,
                       const std::vector<std::string>& names, TrainOptions& o);

// The file name of argv[0] ("lockstep-train", "custom_train"); "lockstep-train" when it is empty.
std::string program_name(const char* argv0);

// --data: an existing file as is; otherwise a dataset name ("fashion-mnist") looked up as
// <dir>/<name>.h5 in $LOCKSTEP_DATA_DIR, then data/. Throws UsageError saying how to create it.
std::string resolve_data_path(const std::string& data);

}  // namespace lockstep
