#include "runtime/model/model_spec.h"

#include <algorithm>
#include <cctype>
#include <stdexcept>

#include "runtime/base/error.h"
#include "runtime/model/layer_registry.h"

namespace lockstep {

std::vector<std::string> split_spec(const std::string& s, char sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    size_t pos = s.find(sep, start);
    parts.push_back(s.substr(start, pos == std::string::npos ? std::string::npos : pos - start));
    if (pos == std::string::npos) return parts;
    start = pos + 1;
  }
}

namespace {

// Sizes beyond this are refused: kernel shapes are int and a typo like dense:10000000 should be
// reported, not attempted.
constexpr long kMaxWidth = 1 << 20;

// The grammar in one line.
std::string grammar_hint() {
  return "layers: " + layer_grammar() + ", joined by ','; presets: linear, mlp[:w1,w2,...], cnn, " +
         "gpt[:tiny|small][,layers=L][,heads=H][,dim=D][,ctx=T][,vocab=V]";
}

[[noreturn]] void bad_spec(const std::string& text, const std::string& why) {
  throw UsageError("--model '" + text + "': " + why + " (" + grammar_hint() + ")");
}

// A positive integer written with digits only, at most kMaxWidth.
bool parse_positive(const std::string& s, int* out) {
  if (s.empty() || s.size() > 8) return false;
  if (!std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); }))
    return false;
  long v = std::stol(s);
  if (v <= 0 || v > kMaxWidth) return false;
  *out = static_cast<int>(v);
  return true;
}

int positive_arg(const std::string& text, const std::string& token, const std::string& what,
                 const std::string& value) {
  int v = 0;
  if (!parse_positive(value, &v))
    bad_spec(text, "in '" + token + "', " + what + " must be a positive integer up to " +
                       std::to_string(kMaxWidth) + ", not '" + value + "'");
  return v;
}

LayerSpec parse_layer(const std::string& text, const std::string& token) {
  std::vector<std::string> parts = split_spec(token, ':');
  std::string suffix;
  const LayerType* type = match_layer_type(parts[0], &suffix);
  if (type == nullptr) bad_spec(text, "unknown layer '" + token + "'");
  LayerToken t(text, token, std::move(suffix),
               std::vector<std::string>(parts.begin() + 1, parts.end()));
  return {type->name, type->parse(t)};
}

LayerSpec dense(int units) { return {"dense", {units}}; }
LayerSpec relu() { return {"relu", {}}; }
LayerSpec conv3x3(int channels) { return {"conv", {3, channels, 1}}; }
LayerSpec maxpool(int k) { return {"maxpool", {k}}; }

// The gpt preset: "gpt", "gpt:tiny", "gpt:small", then key=value overrides, "gpt:layers=4,heads=4,
// dim=128,ctx=128" (tiny's values; small is GPT-2 small's shape).
std::vector<LayerSpec> gpt_layers(const std::string& raw, const std::string& text) {
  int layers = 4, heads = 4, dim = 128, ctx = 128, vocab = 0;  // vocab 0: the data's
  if (text != "gpt") {
    for (const std::string& item : split_spec(text.substr(4), ',')) {
      if (item == "tiny") {
        layers = 4, heads = 4, dim = 128, ctx = 128;
        continue;
      }
      if (item == "small") {
        layers = 12, heads = 12, dim = 768, ctx = 1024;
        continue;
      }
      const size_t eq = item.find('=');
      const std::string key = item.substr(0, eq);
      int* slot = key == "layers"  ? &layers
                  : key == "heads" ? &heads
                  : key == "dim"   ? &dim
                  : key == "ctx"   ? &ctx
                  : key == "vocab" ? &vocab
                                   : nullptr;
      if (slot == nullptr || eq == std::string::npos)
        bad_spec(raw, "'" + item + "' in the gpt preset is not tiny, small or one of layers=, " +
                          "heads=, dim=, ctx=, vocab=");
      *slot = positive_arg(raw, item, key, item.substr(eq + 1));
    }
  }
  if (dim % heads != 0)
    bad_spec(raw,
             "gpt: " + std::to_string(heads) + " heads do not divide dim " + std::to_string(dim));
  std::vector<LayerSpec> out = {{"embed", {dim, ctx}}};
  if (vocab > 0) out[0].args.push_back(vocab);
  for (int i = 0; i < layers; ++i) out.push_back({"block", {heads}});
  out.push_back({"lmhead", {}});
  return out;
}

}  // namespace

LayerToken::LayerToken(const std::string& text, const std::string& token, std::string suffix,
                       std::vector<std::string> args)
    : text_(text), token_(token), suffix_(std::move(suffix)), args_(std::move(args)) {}

void LayerToken::expect_args(size_t lo, size_t hi) const {
  const size_t n = args_.size();
  if (n < lo || n > hi)
    fail("'" + token_ + "' takes " +
         (hi == 0 ? std::string("no arguments")
                  : std::to_string(lo) + " to " + std::to_string(hi) + " ':' arguments"));
}

int LayerToken::positive(const std::string& what, const std::string& value) const {
  return positive_arg(text_, token_, what, value);
}

void LayerToken::fail(const std::string& why) const { bad_spec(text_, why); }

void LayerCheck::fail(const std::string& why) const { throw UsageError(where + why); }

void LayerCheck::need_image(const SampleShape& in) const {
  if (in.size() != 3)
    fail(" needs image samples (H, W, C) but its input has shape " + to_string(in));
}

std::string layer_grammar() {
  std::string layers;
  for (const std::string& s : layer_type_syntaxes()) layers += (layers.empty() ? "" : ", ") + s;
  return layers;
}

ModelSpec parse_model_spec(const std::string& raw) {
  ModelSpec m;
  m.text = raw;
  std::string text;
  for (char c : raw)
    if (!std::isspace(static_cast<unsigned char>(c))) text += c;
  if (text.empty()) throw UsageError("--model is empty (" + grammar_hint() + ")");

  if (text == "linear") {
    m.layers = {dense(0)};
  } else if (text == "cnn") {
    m.layers = {conv3x3(32), relu(), maxpool(2), conv3x3(64), relu(), maxpool(2), dense(0)};
  } else if (text == "mlp" || text.rfind("mlp:", 0) == 0) {
    std::vector<int> widths = {256, 128};
    if (text != "mlp") {
      widths.clear();
      for (const std::string& w : split_spec(text.substr(4), ','))
        widths.push_back(positive_arg(raw, text, "each mlp width", w));
    }
    for (int w : widths) {
      m.layers.push_back(dense(w));
      m.layers.push_back(relu());
    }
    m.layers.push_back(dense(0));
  } else if (text == "gpt" || text.rfind("gpt:", 0) == 0) {
    m.layers = gpt_layers(raw, text);
  } else {
    for (const std::string& token : split_spec(text, ',')) {
      if (token.empty()) bad_spec(raw, "empty layer (two ',' in a row, or one at an end)");
      m.layers.push_back(parse_layer(raw, token));
    }
  }
  return m;
}

std::string to_string(const LayerSpec& l) { return find_layer_type(l.type).format(l); }

std::string to_string(const ModelSpec& m) {
  std::string s;
  for (const LayerSpec& l : m.layers) {
    if (!s.empty()) s += ',';
    s += to_string(l);
  }
  return s;
}

std::string to_string(const SampleShape& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + ")";
}

size_t shape_size(const SampleShape& shape) {
  size_t n = 1;
  for (int d : shape) n *= static_cast<size_t>(d);
  return n;
}

namespace {

// Images stored channels first, (C, H, W) such as PyTorch's (N, 1, 28, 28), read as (H, W, C) give
// a 1-pixel-high image with 28 channels: say so, instead of only that a layer does not fit.
std::string layout_hint(const SampleShape& in) {
  if (in.size() != 3 || in[0] > 4 || in[2] <= 4) return "";
  return "; the samples (" + std::to_string(in[0]) + ", " + std::to_string(in[1]) + ", " +
         std::to_string(in[2]) + ") look channels-first (C, H, W): images must be channels-last " +
         "(N, H, W, C), here (N, " + std::to_string(in[1]) + ", " + std::to_string(in[2]) + ", " +
         std::to_string(in[0]) +
         "); transpose them when writing the file (numpy: " + "x.transpose(0, 2, 3, 1))";
}

std::vector<LayerPlan> plan_layers(const ModelSpec& spec, const SampleShape& input, int outputs,
                                   int positions);

}  // namespace

const char* recompute_name(Recompute r) {
  switch (r) {
    case Recompute::none: return "none";
    case Recompute::gelu: return "gelu";
    case Recompute::blocks: return "blocks";
  }
  return "?";
}

Recompute parse_recompute(const std::string& text) {
  if (text == "none") return Recompute::none;
  if (text == "gelu") return Recompute::gelu;
  if (text == "blocks") return Recompute::blocks;
  throw UsageError("--recompute must be none, gelu or blocks, not '" + text + "'");
}

std::vector<LayerPlan> plan_model(const ModelSpec& spec, const SampleShape& input, int outputs,
                                  int positions) {
  try {
    return plan_layers(spec, input, outputs, positions);
  } catch (const UsageError& e) {
    throw UsageError(e.what() + layout_hint(input));
  }
}

namespace {

std::vector<LayerPlan> plan_layers(const ModelSpec& spec, const SampleShape& input, int outputs,
                                   int positions) {
  if (input.empty() || input.size() == 2 || input.size() > 3 ||
      std::any_of(input.begin(), input.end(), [](int d) { return d <= 0; }))
    throw UsageError("--model '" + spec.text + "': samples of shape " + to_string(input) +
                     " are not supported (need (D) vectors or (H, W, C) images)");
  if (outputs <= 0 || positions <= 0)
    throw UsageError("--model: the data has no outputs to predict");
  std::vector<LayerPlan> plan;
  SampleShape shape = input;
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    LayerPlan p;
    p.spec = spec.layers[i];
    p.in = shape;
    const std::string where = "--model '" + spec.text + "': layer " + std::to_string(i + 1) + " (" +
                              to_string(p.spec) + ")";
    find_layer_type(p.spec.type).plan(p, LayerCheck{outputs, positions, where, &plan});
    if (p.tied >= static_cast<int>(i) || (p.tied >= 0 && plan[p.tied].params == 0))
      throw std::logic_error(where + ": tied to layer " + std::to_string(p.tied + 1) +
                             ", which is not an earlier layer with parameters");
    if (p.params >= kMaxLayerSize || shape_size(p.out) >= kMaxLayerSize)
      throw UsageError(where + " is too large (" + std::to_string(p.params) + " parameters)");
    shape = p.out;
    plan.push_back(p);
  }
  if (plan.empty()) throw UsageError("--model '" + spec.text + "' has no layers");
  if (positions > 1) {
    if (shape != SampleShape{positions, outputs})
      throw UsageError("--model '" + spec.text + "': the model gives " + to_string(shape) +
                       " values per sample but the data needs (" + std::to_string(positions) +
                       ", " + std::to_string(outputs) + "): " + std::to_string(outputs) +
                       " predictions at each of its " + std::to_string(positions) +
                       " positions; end a language model with 'lmhead'");
  } else if (shape.size() != 1 || shape[0] != outputs)
    throw UsageError("--model '" + spec.text + "': the model gives " + to_string(shape) +
                     " values per sample but the data needs " + std::to_string(outputs) +
                     " outputs; end the model with 'dense' (it takes the data's output width)");
  return plan;
}

}  // namespace

}  // namespace lockstep
