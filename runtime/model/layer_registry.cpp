#include "runtime/model/layer_registry.h"

#include <mutex>
#include <stdexcept>

#include "runtime/base/error.h"
#include "runtime/model/layers/builtin.h"

namespace lockstep {
namespace {

// The registered types in registration order. unique_ptr keeps each record where it is while the
// vector grows, so references handed out stay valid.
class Registry {
 public:
  Registry() {
    for (LayerType& t : builtin_layer_types()) add(std::move(t));
  }

  void add(LayerType t) {
    const std::string what = "register_layer('" + t.name + "'): ";
    if (t.name.empty()) throw std::invalid_argument("register_layer: the layer type has no name");
    if (!t.parse || !t.format || !t.plan || !t.make_cpu)
      throw std::invalid_argument(what + "parse, format, plan and make_cpu must all be set");
    if ((t.init == nullptr) != (t.tensors == nullptr))
      throw std::invalid_argument(what + "a type with parameters sets both init and tensors, " +
                                  "one without sets neither");
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& have : types_)
      if (have->name == t.name)
        throw std::invalid_argument(what + "a layer type named '" + t.name +
                                    "' is already registered");
    if (t.syntax.empty()) t.syntax = t.name;
    types_.push_back(std::make_unique<const LayerType>(std::move(t)));
  }

  const LayerType* find(const std::string& name) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& t : types_)
      if (t->name == name) return t.get();
    return nullptr;
  }

  const LayerType* match(const std::string& word, std::string* suffix) {
    std::lock_guard<std::mutex> lock(mutex_);
    const LayerType* best = nullptr;
    for (const auto& t : types_) {
      if (t->name == word) {
        best = t.get();
        break;
      }
      if (t->name_takes_suffix && word.rfind(t->name, 0) == 0 &&
          (best == nullptr || t->name.size() > best->name.size()))
        best = t.get();
    }
    if (best != nullptr && suffix != nullptr) *suffix = word.substr(best->name.size());
    return best;
  }

  std::vector<std::string> list(std::string LayerType::*field) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<std::string> out;
    for (const auto& t : types_) out.push_back((*t).*field);
    return out;
  }

 private:
  std::mutex mutex_;
  std::vector<std::unique_ptr<const LayerType>> types_;
};

// Built on first use (a function-local static: thread-safe, and nothing for a static-library link
// to drop, as a registering static initialiser in another file could be).
Registry& registry() {
  static Registry r;
  return r;
}

std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

}  // namespace

void register_layer(LayerType type) { registry().add(std::move(type)); }

const LayerType& find_layer_type(const std::string& name) {
  if (const LayerType* t = registry().find(name)) return *t;
  throw UsageError("unknown layer type '" + name + "' (known: " + joined(layer_type_names()) + ")");
}

const LayerType* match_layer_type(const std::string& word, std::string* suffix) {
  return registry().match(word, suffix);
}

std::vector<std::string> layer_type_names() { return registry().list(&LayerType::name); }
std::vector<std::string> layer_type_syntaxes() { return registry().list(&LayerType::syntax); }

std::unique_ptr<Layer> make_cpu_layer(const LayerPlan& plan, CpuKernels kernels) {
  return find_layer_type(plan.spec.type).make_cpu(plan, kernels);
}

std::unique_ptr<Layer> make_cuda_layer(const LayerPlan& plan, const CudaLayerPlacement& where) {
  const LayerType& t = find_layer_type(plan.spec.type);
  if (!t.make_cuda)
    throw UsageError("--model: the '" + t.name + "' layer type has no CUDA implementation " +
                     "(CPU-only); train this model with --device cpu");
  return t.make_cuda(plan, where);
}

void check_cuda_layers(const std::vector<LayerPlan>& plan) {
  ModelSpec spec;
  for (const LayerPlan& p : plan) spec.layers.push_back(p.spec);
  check_cuda_layers(spec);
}

void check_cuda_layers(const ModelSpec& spec) {
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    const LayerType& t = find_layer_type(spec.layers[i].type);
    if (!t.make_cuda)
      throw UsageError("--model: layer " + std::to_string(i + 1) + " (" +
                       to_string(spec.layers[i]) + ") has no CUDA implementation (the '" + t.name +
                       "' layer type is CPU-only); train this model with --device cpu");
  }
}

void init_layer_params(const LayerPlan& plan, float* host, std::mt19937_64& gen) {
  const LayerType& t = find_layer_type(plan.spec.type);
  if (t.init) t.init(plan, host, gen);
}

}  // namespace lockstep
