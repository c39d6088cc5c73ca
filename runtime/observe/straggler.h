// Straggler report: in synchronous training one slow rank stalls every rank at the next
// all-reduce, so the job runs at the pace of its slowest rank. Every N steps each rank's mean step
// time over the window since the last report is gathered to every rank (one all_gather of one
// double); the report names the slowest rank and how much slower it is than the median and the
// fastest. Rank 0 prints it and writes it to the metrics file (Progress::note).
// Used by the training thread; measure() is collective.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/observe/step_times.h"

namespace lockstep {

class Communicator;

struct StragglerReport {
  int64_t step = 0;  // global step at the end of the window
  int64_t window_steps = 0;
  std::vector<double> mean_step_s;  // per rank, in rank order
  // Compute only (step time minus the all-reduce): the all-reduce absorbs the waiting, so a
  // slow rank shows up as the others' longer comm phase; compute time points at it directly.
  std::vector<double> mean_compute_s;
  int slowest_rank = 0;  // by compute time
  double median_compute_s = 0, fastest_compute_s = 0, slowest_compute_s = 0;
  double spread = 0;  // slowest / fastest compute time - 1 (0.25 = 25% slower)

  std::string text() const;  // one line for people
  std::string json() const;  // one JSON object for the metrics file
};

class StragglerWatch {
 public:
  // Collective: the report for the steps since the last call (or since construction), then the
  // window restarts. `times` is the trainer's running total.
  StragglerReport measure(Communicator& comm, const StepTimes& times, int64_t global_step);

 private:
  StepTimes since_;
};

}  // namespace lockstep
