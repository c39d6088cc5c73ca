#include "apps/train_faults.h"

#include <climits>

#include "runtime/error.h"

namespace lockstep {

namespace po = boost::program_options;

po::options_description fault_options(FaultRaw& r) {
  po::options_description d("Checkpoints and faults");
  d.add_options()
      ("checkpoint-dir", po::value(&r.checkpoint_dir)->default_value(""),
       "write checkpoints (HDF5, ckpt-<step>.h5) to this folder: every --checkpoint-every steps, "
       "at the end, and when SIGTERM/SIGINT/SIGUSR1 stops the run")
      ("checkpoint-every", po::value(&r.checkpoint_every)->default_value(0),
       "steps between checkpoints (0: only at the end and on a stop signal)")
      ("keep-checkpoints", po::value(&r.keep_checkpoints)->default_value(3),
       "newest checkpoints kept in --checkpoint-dir (0: keep all)")
      ("resume", po::value(&r.resume)->default_value(""),
       "continue from a checkpoint file, or the newest in a folder (any world size)")
      ("overwrite-checkpoints", po::bool_switch(&r.overwrite),
       "a fresh run deletes the checkpoints already in --checkpoint-dir (without it, and without "
       "--resume, it refuses them)")
      ("checkpoint-timeout", po::value(&r.checkpoint_timeout)->default_value(0.0, "0"),
       "seconds every rank waits for rank 0 to write a checkpoint before the job fails (0: "
       "--timeout plus 1 s per 10 MB of checkpoint)")
      ("on-nan", po::value(&r.on_nan)->default_value("stop"),
       "a NaN/Inf loss or gradient: stop (exit 2 naming the step) | skip (drop that update)");
  return d;
}

void apply_fault_options(const FaultRaw& r, GuardOptions& guard, std::string& resume) {
  guard.checkpoint_dir = r.checkpoint_dir;
  guard.checkpoint_every = r.checkpoint_every;
  if (r.keep_checkpoints < 0 || r.keep_checkpoints > INT_MAX)
    throw UsageError("--keep-checkpoints must be >= 0 (0 keeps all), not " +
                     std::to_string(r.keep_checkpoints));
  guard.keep_checkpoints = static_cast<int>(r.keep_checkpoints);
  guard.on_nan = parse_nan_policy(r.on_nan);
  guard.checkpoint_timeout = r.checkpoint_timeout;
  guard.existing = !r.resume.empty() ? ExistingCheckpoints::keep
                   : r.overwrite     ? ExistingCheckpoints::replace
                                     : ExistingCheckpoints::refuse;
  validate(guard);
  resume = r.resume;
}

}  // namespace lockstep
