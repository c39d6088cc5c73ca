// A trained model for inference, rebuilt from a checkpoint: the checkpoint's spec planned against
// an input shape, its parameters written in by tensor name. Shared by the inference programs
// (lockstep-generate, lockstep-predict, lockstep-export); header-only, as apps/ builds each
// executable from its own files. Used by one thread. No collective calls.
#pragma once

#include <exception>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/base/error.h"
#include "runtime/data/h5_read.h"
#include "runtime/model/model.h"
#include "runtime/train/checkpoint.h"

namespace lockstep::apps {

// The model of `state` (read from `path`) for inputs of `input` shape with `outputs` values at each
// of `positions` positions, batches up to max_batch, on `place`; every parameter tensor the model
// has must be in the checkpoint with its shape (UsageError naming `path` and the tensor if not).
inline std::unique_ptr<Model> model_from_checkpoint(const CheckpointState& state,
                                                    const std::string& path,
                                                    const SampleShape& input, int outputs,
                                                    int max_batch, const ModelPlacement& place,
                                                    int positions = 1) {
  auto model = std::make_unique<Model>(parse_model_spec(state.model_spec), input, outputs,
                                       max_batch, place, positions);
  for (const ParamTensorInfo& t : model->param_tensors()) {
    const NamedTensor* p = find_tensor(state.params, t.name);
    if (p == nullptr)
      throw UsageError(path + ": parameter " + t.name + " is missing for model " +
                       state.model_spec);
    if (p->shape != t.shape || p->data.size() != t.count)
      throw UsageError(path + ": parameter " + t.name + " has shape " +
                       h5_read::shape_text(p->shape) + " in the checkpoint, but model " +
                       state.model_spec + " needs " + h5_read::shape_text(t.shape) +
                       " for these inputs");
    model->write_params(t.offset, p->data.data(), t.count);
  }
  return model;
}

// A planning error of the checkpoint's model as an inference program says it: the spec's parser
// and planner speak of lockstep-train's --model option ("--model 'SPEC': ..."), which these
// programs do not have; the prefix goes.
inline std::string planning_problem(const std::string& message, const std::string& spec) {
  const std::string prefix = "--model '" + spec + "': ";
  return message.rfind(prefix, 0) == 0 ? message.substr(prefix.size()) : message;
}

// The outputs per position of `state`'s model, read off its parameters: the model is planned (not
// built) for 1 and for 2 outputs, and the checkpoint's size of the dimension that changes between
// the two (the head's) is the answer. UsageError naming `path` when the model cannot take `input`,
// or when the checkpoint lacks the head's tensor.
inline int checkpoint_outputs(const CheckpointState& state, const std::string& path,
                              const SampleShape& input, int positions = 1) {
  const ModelSpec spec = parse_model_spec(state.model_spec);
  const std::vector<ParamTensorInfo> one =
      planned_param_tensors(plan_model(spec, input, 1, positions));
  const std::vector<ParamTensorInfo> two =
      planned_param_tensors(plan_model(spec, input, 2, positions));
  for (size_t t = 0; t < one.size() && t < two.size(); ++t) {
    if (one[t].shape == two[t].shape || one[t].shape.size() != two[t].shape.size()) continue;
    const NamedTensor* p = find_tensor(state.params, one[t].name);
    if (p == nullptr || p->shape.size() != one[t].shape.size())
      throw UsageError(path + ": parameter " + one[t].name +
                       (p == nullptr ? " is missing" : " has another shape") + " for model " +
                       state.model_spec);
    for (size_t d = 0; d < one[t].shape.size(); ++d)
      if (one[t].shape[d] != two[t].shape[d]) return static_cast<int>(p->shape[d]);
  }
  throw UsageError(path + ": cannot tell the outputs of model " + state.model_spec +
                   " from its parameters");
}

// Checks `state`'s parameter tensors against its model spec planned for what the run recorded
// (input_shape, outputs, positions: CheckpointState::config): every tensor the model has, with its
// shape, and none other (UsageError naming `path` and the tensor, as --resume refuses). Returns
// false, checking nothing, for a checkpoint without that record (written before it was kept).
inline bool check_checkpoint_tensors(const CheckpointState& state, const std::string& path) {
  std::map<std::string, std::string> record = config_record_values(state.config);
  if (!record.count("input_shape") || !record.count("outputs") || !record.count("positions"))
    return false;
  SampleShape input;
  int outputs = 0, positions = 0;
  try {
    for (const std::string& d : split_spec(record["input_shape"], ','))
      input.push_back(std::stoi(d));
    outputs = std::stoi(record["outputs"]);
    positions = std::stoi(record["positions"]);
  } catch (const std::exception&) {
    throw UsageError(path + ": its record of the model's input_shape, outputs and positions is " +
                     "damaged ('" + record["input_shape"] + "', '" + record["outputs"] + "', '" +
                     record["positions"] + "')");
  }
  CheckpointExpectation want;
  want.model_spec = state.model_spec;
  want.optimizer = state.optimizer;
  try {
    const std::vector<LayerPlan> plan =
        plan_model(parse_model_spec(state.model_spec), input, outputs, positions);
    for (const ParamTensorInfo& t : planned_param_tensors(plan))
      want.params.push_back({t.name, t.shape, {}});
  } catch (const UsageError& e) {
    throw UsageError(path + ": its model does not plan for the input it recorded: " +
                     planning_problem(e.what(), state.model_spec));
  }
  check_compatible(state, want, path);
  return true;
}

}  // namespace lockstep::apps
