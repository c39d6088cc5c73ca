// The layer types every build has, in the order the --model grammar lists them. The registry
// (layer_registry.cpp) registers them on its first use, by calling this: an explicit list, so a
// static-library link cannot drop a layer the way it drops an unreferenced registering object.
// Stateless.
// Called once, as the registry is first built (a function-local static: thread-safe). No
// collective calls.
#pragma once

#include <vector>

#include "runtime/model/layer_registry.h"

namespace lockstep {

std::vector<LayerType> builtin_layer_types();

}  // namespace lockstep
