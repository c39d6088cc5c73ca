// lockstep-train's checkpoint and fault options (--checkpoint-dir, --checkpoint-every,
// --keep-checkpoints, --resume, --overwrite-checkpoints, --checkpoint-timeout, --on-nan), kept beside the other option groups of
// train_options.cpp: describe them into a Boost options group, then turn the raw values into the
// trainer's GuardOptions and the app's resume path. Main thread only.
#pragma once

#include <boost/program_options.hpp>

#include <cstdint>
#include <string>

#include "runtime/step_guard.h"

namespace lockstep {

struct FaultRaw {
  std::string checkpoint_dir, resume, on_nan;
  int64_t checkpoint_every = 0, keep_checkpoints = 0;
  double checkpoint_timeout = 0;
  bool overwrite = false;
};

boost::program_options::options_description fault_options(FaultRaw& r);

// Checks the values (UsageError naming the option) and fills `guard` and `resume`.
void apply_fault_options(const FaultRaw& r, GuardOptions& guard, std::string& resume);

}  // namespace lockstep
