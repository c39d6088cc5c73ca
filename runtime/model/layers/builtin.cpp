#include "runtime/model/layers/builtin.h"

#include "runtime/model/layers/conv.h"
#include "runtime/model/layers/dense.h"
#include "runtime/model/layers/flatten.h"
#include "runtime/model/layers/gpt.h"
#include "runtime/model/layers/maxpool.h"
#include "runtime/model/layers/relu.h"

namespace lockstep {

// A new built-in layer adds its line here (and its include above).
std::vector<LayerType> builtin_layer_types() {
  std::vector<LayerType> types;
  types.push_back(dense_layer_type());
  types.push_back(conv_layer_type());
  types.push_back(maxpool_layer_type());
  types.push_back(relu_layer_type());
  types.push_back(flatten_layer_type());
  types.push_back(embed_layer_type());
  types.push_back(block_layer_type());
  types.push_back(lmhead_layer_type());
  return types;
}

}  // namespace lockstep
