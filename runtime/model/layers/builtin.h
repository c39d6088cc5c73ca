// The layer types every build has, in the order the --model grammar lists them. The registry
// (layer_registry.cpp) registers them on its first use, by calling this: an explicit list, so a
// static-library link cannot drop a layer the way it drops an unreferenced registering object.
// Stateless.
#pragma once

#include <vector>

#include "runtime/model/layer_registry.h"

namespace lockstep {

std::vector<LayerType> builtin_layer_types();

}  // namespace lockstep
