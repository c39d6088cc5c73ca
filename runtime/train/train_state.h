// TrainState: where a training run is, as the Trainer, its checkpoints and its reports see it.
// Plain data: one thread uses it at a time. No collective calls.
#pragma once

#include <cstdint>

namespace lockstep {

// An epoch has Trainer::steps_per_epoch() steps; global_step counts all updates.
struct TrainState {
  int epoch = 0;              // 0-based
  int64_t step_in_epoch = 0;  // updates already applied in `epoch`
  int64_t global_step = 0;
  int64_t samples_seen = 0;  // valid samples trained on, over all ranks
};

}  // namespace lockstep
