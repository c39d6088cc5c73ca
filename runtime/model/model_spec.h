// Model descriptions as short strings (the --model option), and the shape plan that checks a
// model against the data before any buffer is allocated.
//
// Grammar (spaces ignored, names case-sensitive):
//   spec   := preset | layer ("," layer)*
//   preset := "linear"                        one dense layer to the data's outputs
//           | "mlp" [":" width ("," width)*]  dense:width,relu per width, then dense; "mlp" alone
//                                             is mlp:256,128
//           | "cnn"                           conv3x3:32,relu,maxpool2,conv3x3:64,relu,maxpool2,dense
//   layer  := "dense" [":" units]             fully connected; without units it gives the data's
//                                             outputs (classes, or the regression target width).
//                                             Image inputs are flattened first (NHWC order).
//           | "conv" K "x" K ":" channels [":" stride]
//                                             K x K convolution, zero padding K/2 ("same" for odd
//                                             K at stride 1), stride 1 by default
//           | "maxpool" K                     K x K max pooling, stride K
//           | "relu" | "flatten"
// The model's last layer must produce the data's outputs. Parsing is pure and throws UsageError
// naming --model and the offending token; plan_model() adds the shape checks.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace lockstep {

enum class LayerKind { dense, conv2d, maxpool, relu, flatten };
const char* layer_kind_name(LayerKind k);

struct LayerSpec {
  LayerKind kind = LayerKind::dense;
  int units = 0;     // dense: outputs (0 = the data's outputs); conv2d: output channels
  int kernel = 0;    // conv2d, maxpool: window side
  int stride = 1;    // conv2d
};

struct ModelSpec {
  std::string text;               // as the user wrote it
  std::vector<LayerSpec> layers;  // presets expanded
};

ModelSpec parse_model_spec(const std::string& text);

// The canonical token of a layer ("conv3x3:32", "dense:10", "maxpool2") and of a whole model
// (layers joined by ","; parse_model_spec(to_string(m)) gives m's layers back).
std::string to_string(const LayerSpec& layer);
std::string to_string(const ModelSpec& model);

// Per-sample shapes: {D} for vectors, {H, W, C} for images (NHWC without the batch).
using SampleShape = std::vector<int>;
std::string to_string(const SampleShape& shape);  // "(28, 28, 1)"
size_t shape_size(const SampleShape& shape);

// One layer with its shapes resolved.
struct LayerPlan {
  LayerSpec spec;
  SampleShape in, out;
  size_t params = 0;  // weights + biases
};

// Resolves shapes through the layers for an input sample shape and the data's output width;
// throws UsageError (naming --model, the layer and both shapes) when a layer cannot take its
// input or the last layer does not give `outputs` values.
std::vector<LayerPlan> plan_model(const ModelSpec& spec, const SampleShape& input, int outputs);

}  // namespace lockstep
