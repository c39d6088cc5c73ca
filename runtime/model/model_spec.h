// Model descriptions as short strings (the --model option), and the shape plan that checks a
// model against the data before any buffer is allocated.
//
// Grammar (spaces ignored, names case-sensitive):
//   spec   := preset | layer ("," layer)*
//   preset := "linear"                        one dense layer to the data's outputs
//           | "mlp" [":" width ("," width)*]  dense:width,relu per width, then dense; "mlp" alone
//                                             is mlp:256,128
//           | "cnn" conv3x3:32,relu,maxpool2,conv3x3:64,relu,maxpool2,dense | "gpt" [":" item (","
//           item)*]    a GPT-2 style language model (layers/gpt.h):
//                                             embed:D:T, L x block:H, lmhead; items "tiny" (L=4,
//                                             H=4, D=128, T=128: the default), "small" (GPT-2
//                                             small: 12, 12, 768, 1024) and layers=, heads=, dim=,
//                                             ctx= overrides, later items winning
//   layer  := name [suffix] (":" arg)*        a registered layer type (layer_registry.h); built in:
//           | "dense" [":" units]             fully connected; without units it gives the data's
//                                             outputs (classes, or the regression target width).
//                                             Image inputs are flattened first (NHWC order).
//           | "conv" K "x" K ":" channels [":" stride]
//                                             K x K convolution, zero padding K/2 ("same" for odd
//                                             K at stride 1), stride 1 by default
//           | "maxpool" K                     K x K max pooling, stride K
//           | "relu" | "flatten"
//           | "embed:" dim ":" ctx | "block:" heads | "lmhead"   the gpt preset's layers
// The model's last layer must produce the data's outputs. Parsing is pure and throws UsageError
// naming --model and the offending token; plan_model() adds the shape checks. Each layer type
// reads its own arguments and plans its own shapes (runtime/model/layers/*.cpp); this file holds
// the grammar around them and the words of its errors (LayerToken, LayerCheck).
// Pure functions over values: thread-safe once the layer types are registered. No collective
// calls: every rank parses the same spec alike.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace lockstep {

// One layer of a spec: its registered type ("dense", "conv", "maxpool") and the integer arguments
// that type's parser read, in the order the type documents (conv: kernel, channels, stride).
struct LayerSpec {
  std::string type;
  std::vector<int> args;
  bool operator==(const LayerSpec&) const = default;
};

struct ModelSpec {
  std::string text;               // as the user wrote it
  std::vector<LayerSpec> layers;  // presets expanded
};

ModelSpec parse_model_spec(const std::string& text);

// Splits s at each `sep` ("3x3" -> {"3", "3"}; "a,,b" -> {"a", "", "b"}): the spec parser's and
// the layer types' word splitting.
std::vector<std::string> split_spec(const std::string& s, char sep);

// The layer words a spec may use, from the layer registry at the time of the call (built-ins, then
// registered ones): "dense[:units], convKxK:channels[:stride], maxpoolK, relu, flatten, ...".
std::string layer_grammar();

// The canonical token of a layer ("conv3x3:32", "dense:10", "maxpool2") and of a whole model
// (layers joined by ","; parse_model_spec(to_string(m)) gives m's layers back).
std::string to_string(const LayerSpec& layer);
std::string to_string(const ModelSpec& model);

// Per-sample shapes: {D} for vectors, {H, W, C} for images (NHWC without the batch).
using SampleShape = std::vector<int>;
std::string to_string(const SampleShape& shape);  // "(28, 28, 1)"
size_t shape_size(const SampleShape& shape);

// Layers with this many parameters or output values per sample, or more, are refused: kernel
// shapes are int.
constexpr size_t kMaxLayerSize = size_t{1} << 31;

// What a layer that keeps activations for its backward pass recomputes there instead
// (--recompute; a GPT block's is the only such layer, gpt_layers.h): nothing; the GELU's output
// from its kept input; or the whole block from its input, which the model keeps anyway.
enum class Recompute { none, gelu, blocks };
const char* recompute_name(Recompute r);
Recompute parse_recompute(const std::string& text);  // throws UsageError naming --recompute

// One layer with its shapes resolved.
struct LayerPlan {
  LayerSpec spec;
  SampleShape in, out;
  size_t params = 0;  // weights + biases
  // The index of an earlier layer whose first parameter tensor this layer also reads and adds its
  // gradient to (a language model's output head tied to its token embedding); -1: none. The
  // planner of the type sets it (LayerCheck::earlier); the model binds it (Layer::bind_tied).
  int tied = -1;
  // The CPU planner's marks (cpu_plan.h), each set where the layer types' plan hooks agree
  // (layer_registry.h); on CUDA all stay unset but fused_next, absorbed and a fused layer's
  // fused_relu, with LOCKSTEP_CUDA_CONV_POOL=fused (plan_cuda). fused_relu: the layer applies the
  // ReLU after it in its forward pass and masks its incoming gradient by it (a convolution, a
  // max-pool on blocked input).
  bool fused_relu = false;
  // The layer's input (and its gradient) / output (and its gradient) stay in oneDNN's 16-channel
  // blocks (aBcd16b, the same size as NHWC) between a layer that hands them on and the next that
  // takes them, layout-agnostic layers (ReLUs) between them included: oneDNN's convolutions choose
  // that layout themselves on AVX-512, and every reorder to and from NHWC is spared.
  bool in_blocked16 = false;
  bool out_blocked16 = false;
  // The plans of the layers after this one that it runs in its own kernel, in order (the first
  // convolution's max-pool, with that pool's fused_relu); its output is then the last one's, in
  // that one's layout (out_blocked16). Whole plans rather than fields of the fusing type's own (a
  // pool's window), so LayerPlan needs no field per fusion and a registered type's fusion carries
  // what it needs the same way.
  std::vector<LayerPlan> fused_next;
  // An earlier layer does this one's work (its activation was fused there, or the layer is in that
  // one's fused_next): the model gives it a PassThroughLayer.
  bool absorbed = false;
  // An activation written before the layer now ahead of it and moved after it, as the two commute
  // (commute_activations, cpu_plan.h): the model's summary says so.
  bool commuted = false;
  // What the layer recomputes in its backward pass instead of keeping it from the forward pass
  // (ModelPlacement::recompute, every layer alike; layers that keep nothing ignore it).
  Recompute recompute = Recompute::none;
};

// Resolves shapes through the layers for an input sample shape and the data's output width;
// throws UsageError (naming --model, the layer and both shapes) when a layer cannot take its
// input or the last layer does not give `outputs` values. With positions > 1 (a language model:
// one prediction per input token) the last layer gives (positions, outputs) per sample.
std::vector<LayerPlan> plan_model(const ModelSpec& spec, const SampleShape& input, int outputs,
                                  int positions = 1);

// What a layer type's parser sees of one token, "conv3x3:32:2": the word after the type's name
// ("3x3"), the ':' arguments ({"32", "2"}), and the parser's ways to refuse it, which all throw
// UsageError naming --model, the token and the grammar.
class LayerToken {
 public:
  LayerToken(const std::string& text, const std::string& token, std::string suffix,
             std::vector<std::string> args);
  const std::string& token() const { return token_; }
  const std::string& suffix() const { return suffix_; }
  const std::vector<std::string>& args() const { return args_; }
  // Refuses the token unless it has lo..hi ':' arguments.
  void expect_args(size_t lo, size_t hi) const;
  // `value` as a positive integer (digits only, at most 2^20); `what` names it in the error.
  int positive(const std::string& what, const std::string& value) const;
  // "--model '<text>': <why> (<grammar>)".
  [[noreturn]] void fail(const std::string& why) const;

 private:
  const std::string& text_;
  const std::string& token_;
  std::string suffix_;
  std::vector<std::string> args_;
};

// What a layer type's planner gets besides the plan it fills: the data's output width and the
// words that name the layer in an error ("--model 'cnn': layer 1 (conv3x3:32)").
struct LayerCheck {
  int outputs = 0;    // per position
  int positions = 1;  // predictions per sample (tokens of a sequence; 1 otherwise)
  std::string where;
  // The plans of the layers before this one (a tied layer finds the one it shares with).
  const std::vector<LayerPlan>* earlier = nullptr;
  // Throws UsageError(where + why): `why` starts with its own separator (": ..." or " ...").
  [[noreturn]] void fail(const std::string& why) const;
  // Refuses an input that is not an image (H, W, C).
  void need_image(const SampleShape& in) const;
};

}  // namespace lockstep
