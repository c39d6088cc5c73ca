// The flatten layer type: "flatten", an (H, W, C) image as an (H*W*C) vector in NHWC order; no
// parameters or args. NHWC data is already in that order, so the layer is a view (the model
// passes the pointers through): the same layer serves the CPU and CUDA, and flatten.cpp is all of
// it. Stateless functions.
// Thread-safe; no collective calls.
#pragma once

#include "runtime/model/layer_registry.h"

namespace lockstep {

LayerType flatten_layer_type();

}  // namespace lockstep
