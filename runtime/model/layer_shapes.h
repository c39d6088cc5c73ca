// The kernel shapes of a planned layer at a batch size, shared by the CPU layers (layers.cpp) and
// their CUDA twins (cuda_layers.cpp) so both call the kernels with the same geometry, and where a
// layer's bias sits in its parameter range (after the weights). Header-only, stateless.
#pragma once

#include <cstddef>

#include "kernels/conv2d.h"
#include "kernels/dense.h"
#include "kernels/pool.h"
#include "runtime/model/model_spec.h"

namespace lockstep {

inline kernels::DenseShape dense_shape(const LayerPlan& p, int batch) {
  return {batch, static_cast<int>(shape_size(p.in)), static_cast<int>(shape_size(p.out))};
}

inline kernels::Conv2dShape conv2d_shape(const LayerPlan& p, int batch) {
  kernels::Conv2dShape s;
  s.n = batch;
  s.h = p.in[0];
  s.w = p.in[1];
  s.c_in = p.in[2];
  s.c_out = p.spec.units;
  s.kh = s.kw = p.spec.kernel;
  s.stride = p.spec.stride;
  s.pad_h = s.pad_w = p.spec.kernel / 2;
  return s;
}

inline kernels::PoolShape pool_shape(const LayerPlan& p, int batch) {
  return {batch, p.in[0], p.in[1], p.in[2], p.spec.kernel};
}

// Offset of the bias within a dense or conv2d layer's parameters: its c_out values come last.
inline size_t bias_offset(const LayerPlan& p) {
  return p.params - static_cast<size_t>(p.out.back());
}

}  // namespace lockstep
