#include "runtime/model/model_spec.h"

#include <algorithm>
#include <cctype>

#include "runtime/base/error.h"

namespace lockstep {

namespace {

// Sizes beyond this are refused: kernel shapes are int and a typo like dense:10000000 should be
// reported, not attempted.
constexpr long kMaxWidth = 1 << 20;
constexpr size_t kMaxLayerParams = size_t{1} << 31;

const char* kGrammarHint =
    "layers: dense[:units], convKxK:channels[:stride], maxpoolK, relu, flatten, joined by ','; "
    "presets: linear, mlp[:w1,w2,...], cnn";

[[noreturn]] void bad_spec(const std::string& text, const std::string& why) {
  throw UsageError("--model '" + text + "': " + why + " (" + kGrammarHint + ")");
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

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    size_t pos = s.find(sep, start);
    parts.push_back(s.substr(start, pos == std::string::npos ? std::string::npos : pos - start));
    if (pos == std::string::npos) return parts;
    start = pos + 1;
  }
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
  std::vector<std::string> parts = split(token, ':');
  const std::string& name = parts[0];
  auto expect_args = [&](size_t lo, size_t hi) {
    size_t n = parts.size() - 1;
    if (n < lo || n > hi)
      bad_spec(text, "'" + token + "' takes " +
                         (hi == 0 ? std::string("no arguments")
                                  : std::to_string(lo) + " to " + std::to_string(hi) +
                                        " ':' arguments"));
  };
  LayerSpec l;
  if (name == "dense") {
    expect_args(0, 1);
    l.kind = LayerKind::dense;
    if (parts.size() == 2) l.units = positive_arg(text, token, "units", parts[1]);
    return l;
  }
  if (name == "relu" || name == "flatten") {
    expect_args(0, 0);
    l.kind = name == "relu" ? LayerKind::relu : LayerKind::flatten;
    return l;
  }
  if (name.rfind("maxpool", 0) == 0) {
    expect_args(0, 0);
    l.kind = LayerKind::maxpool;
    l.kernel = positive_arg(text, token, "the pool size", name.substr(7));
    return l;
  }
  if (name.rfind("conv", 0) == 0) {
    expect_args(1, 2);
    std::vector<std::string> k = split(name.substr(4), 'x');
    if (k.size() != 2) bad_spec(text, "'" + token + "': write the kernel as convKxK, e.g. conv3x3");
    int kh = positive_arg(text, token, "the kernel size", k[0]);
    int kw = positive_arg(text, token, "the kernel size", k[1]);
    if (kh != kw) bad_spec(text, "'" + token + "': only square kernels are supported");
    l.kind = LayerKind::conv2d;
    l.kernel = kh;
    l.units = positive_arg(text, token, "channels", parts[1]);
    if (parts.size() == 3) l.stride = positive_arg(text, token, "the stride", parts[2]);
    return l;
  }
  bad_spec(text, "unknown layer '" + token + "'");
}

LayerSpec dense(int units) { return {LayerKind::dense, units, 0, 1}; }
LayerSpec relu() { return {LayerKind::relu, 0, 0, 1}; }
LayerSpec conv3x3(int channels) { return {LayerKind::conv2d, channels, 3, 1}; }
LayerSpec maxpool(int k) { return {LayerKind::maxpool, 0, k, 1}; }

}  // namespace

const char* layer_kind_name(LayerKind k) {
  switch (k) {
    case LayerKind::dense: return "dense";
    case LayerKind::conv2d: return "conv2d";
    case LayerKind::maxpool: return "maxpool";
    case LayerKind::relu: return "relu";
    case LayerKind::flatten: return "flatten";
  }
  return "?";
}

ModelSpec parse_model_spec(const std::string& raw) {
  ModelSpec m;
  m.text = raw;
  std::string text;
  for (char c : raw)
    if (!std::isspace(static_cast<unsigned char>(c))) text += c;
  if (text.empty()) throw UsageError(std::string("--model is empty (") + kGrammarHint + ")");

  if (text == "linear") {
    m.layers = {dense(0)};
  } else if (text == "cnn") {
    m.layers = {conv3x3(32), relu(), maxpool(2), conv3x3(64), relu(), maxpool(2), dense(0)};
  } else if (text == "mlp" || text.rfind("mlp:", 0) == 0) {
    std::vector<int> widths = {256, 128};
    if (text != "mlp") {
      widths.clear();
      for (const std::string& w : split(text.substr(4), ','))
        widths.push_back(positive_arg(raw, text, "each mlp width", w));
    }
    for (int w : widths) {
      m.layers.push_back(dense(w));
      m.layers.push_back(relu());
    }
    m.layers.push_back(dense(0));
  } else {
    for (const std::string& token : split(text, ',')) {
      if (token.empty()) bad_spec(raw, "empty layer (two ',' in a row, or one at an end)");
      m.layers.push_back(parse_layer(raw, token));
    }
  }
  return m;
}

std::string to_string(const LayerSpec& l) {
  switch (l.kind) {
    case LayerKind::dense: return l.units ? "dense:" + std::to_string(l.units) : "dense";
    case LayerKind::conv2d: {
      std::string k = std::to_string(l.kernel);
      std::string s = "conv" + k + "x" + k + ":" + std::to_string(l.units);
      return l.stride == 1 ? s : s + ":" + std::to_string(l.stride);
    }
    case LayerKind::maxpool: return "maxpool" + std::to_string(l.kernel);
    case LayerKind::relu: return "relu";
    case LayerKind::flatten: return "flatten";
  }
  return "?";
}

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
         std::to_string(in[0]) + "); transpose them when writing the file (numpy: " +
         "x.transpose(0, 2, 3, 1))";
}

std::vector<LayerPlan> plan_layers(const ModelSpec& spec, const SampleShape& input, int outputs);

}  // namespace

std::vector<LayerPlan> plan_model(const ModelSpec& spec, const SampleShape& input, int outputs) {
  try {
    return plan_layers(spec, input, outputs);
  } catch (const UsageError& e) {
    throw UsageError(e.what() + layout_hint(input));
  }
}

namespace {

std::vector<LayerPlan> plan_layers(const ModelSpec& spec, const SampleShape& input, int outputs) {
  if (input.empty() || input.size() == 2 || input.size() > 3 ||
      std::any_of(input.begin(), input.end(), [](int d) { return d <= 0; }))
    throw UsageError("--model '" + spec.text + "': samples of shape " + to_string(input) +
                     " are not supported (need (D) vectors or (H, W, C) images)");
  if (outputs <= 0) throw UsageError("--model: the data has no outputs to predict");
  std::vector<LayerPlan> plan;
  SampleShape shape = input;
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    LayerPlan p;
    p.spec = spec.layers[i];
    p.in = shape;
    const std::string where = "--model '" + spec.text + "': layer " + std::to_string(i + 1) +
                              " (" + to_string(p.spec) + ")";
    auto need_image = [&] {
      if (shape.size() != 3)
        throw UsageError(where + " needs image samples (H, W, C) but its input has shape " +
                         to_string(shape));
    };
    switch (p.spec.kind) {
      case LayerKind::dense: {
        int out = p.spec.units ? p.spec.units : outputs;
        size_t in = shape_size(shape);
        p.out = {out};
        p.params = in * static_cast<size_t>(out) + static_cast<size_t>(out);
        break;
      }
      case LayerKind::conv2d: {
        need_image();
        int k = p.spec.kernel, s = p.spec.stride, pad = k / 2;
        int oh = (shape[0] + 2 * pad - k) / s + 1, ow = (shape[1] + 2 * pad - k) / s + 1;
        if (shape[0] + 2 * pad < k || shape[1] + 2 * pad < k || oh <= 0 || ow <= 0)
          throw UsageError(where + ": the kernel is larger than its input " + to_string(shape));
        p.out = {oh, ow, p.spec.units};
        p.params = static_cast<size_t>(k) * k * shape[2] * p.spec.units + p.spec.units;
        break;
      }
      case LayerKind::maxpool: {
        need_image();
        int k = p.spec.kernel;
        if (shape[0] < k || shape[1] < k)
          throw UsageError(where + ": the window is larger than its input " + to_string(shape));
        p.out = {shape[0] / k, shape[1] / k, shape[2]};
        break;
      }
      case LayerKind::relu: p.out = shape; break;
      case LayerKind::flatten:
        if (shape_size(shape) >= kMaxLayerParams) throw UsageError(where + " is too large");
        p.out = {static_cast<int>(shape_size(shape))};
        break;
    }
    if (p.params >= kMaxLayerParams || shape_size(p.out) >= kMaxLayerParams)
      throw UsageError(where + " is too large (" + std::to_string(p.params) + " parameters)");
    shape = p.out;
    plan.push_back(p);
  }
  if (plan.empty()) throw UsageError("--model '" + spec.text + "' has no layers");
  if (shape.size() != 1 || shape[0] != outputs)
    throw UsageError("--model '" + spec.text + "': the model gives " + to_string(shape) +
                     " values per sample but the data needs " + std::to_string(outputs) +
                     " outputs; end the model with 'dense' (it takes the data's output width)");
  return plan;
}

}  // namespace

}  // namespace lockstep
