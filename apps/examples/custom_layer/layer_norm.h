// A user's own layer, written against Lockstep's public API only: "layernorm", layer
// normalisation. Each sample's values are normalised over the last dimension of its shape (the
// features of a vector, the channels of each pixel of an image), y = gamma * (x - mean) / sqrt(var
// + 1e-5) + beta, with the biased variance and a learned gamma and beta per feature (starting at 1
// and 0). CPU only: it sets no CUDA factory, so the registry refuses it with --device cuda.
//
// register_layer_norm() adds the type to the layer registry; a program calls it once, on every
// rank, before train_main (or before parsing a --model that names it). Not collective; the layers
// it makes are used by one thread at a time, as every layer.
#pragma once

#include <lockstep/model/layer_registry.h>

namespace example {

// Its gamma and beta, and the small number added to the variance.
constexpr float kLayerNormEps = 1e-5f;

// The record the registry keeps: name "layernorm", no arguments, parameters "gamma" and "beta".
lockstep::LayerType layer_norm_type();

// register_layer(layer_norm_type()) once per process; later calls do nothing.
void register_layer_norm();

}  // namespace example
