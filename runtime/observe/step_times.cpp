#include "runtime/observe/step_times.h"

namespace lockstep {

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::data: return "data";
    case Phase::forward: return "forward";
    case Phase::backward: return "backward";
    case Phase::comm: return "comm";
    case Phase::optimizer: return "optimizer";
  }
  return "?";
}

double& StepTimes::operator[](Phase p) {
  switch (p) {
    case Phase::data: return data;
    case Phase::forward: return forward;
    case Phase::backward: return backward;
    case Phase::comm: return comm;
    case Phase::optimizer: return optimizer;
  }
  return data;
}

void StepTimes::add(const StepTimes& o) {
  data += o.data;
  forward += o.forward;
  backward += o.backward;
  comm += o.comm;
  optimizer += o.optimizer;
  total += o.total;
  steps += o.steps;
  samples += o.samples;
}

StepTimes StepTimes::minus(const StepTimes& e) const {
  StepTimes d = *this;
  d.data -= e.data;
  d.forward -= e.forward;
  d.backward -= e.backward;
  d.comm -= e.comm;
  d.optimizer -= e.optimizer;
  d.total -= e.total;
  d.steps -= e.steps;
  d.samples -= e.samples;
  return d;
}

}  // namespace lockstep
