// A trained model for inference, rebuilt from a checkpoint: the checkpoint's spec planned against
// an input shape, its parameters written in by tensor name. Shared by the inference programs
// (lockstep-generate); header-only, as apps/ builds each executable from its own files.
// Used by one thread. No collective calls.
#pragma once

#include <memory>
#include <string>

#include "runtime/base/error.h"
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
    if (p == nullptr || p->shape != t.shape || p->data.size() != t.count)
      throw UsageError(path + ": parameter " + t.name +
                       (p == nullptr ? " is missing" : " has another shape") + " for model " +
                       state.model_spec);
    model->write_params(t.offset, p->data.data(), t.count);
  }
  return model;
}

}  // namespace lockstep::apps
