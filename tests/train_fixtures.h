// Fixtures shared by the trainer tests: a small learnable image dataset (label-dependent stripes
// on noise), the GPU trainer tests' configurations on it, how two parameter vectors differ, and a
// finished run to compare with another (Trained, expect_same_bits). Header-only.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "runtime/data/h5_writer.h"
#include "runtime/data/hdf5_util.h"
#include "runtime/train/trainer.h"

namespace lockstep::testing_util {

// train/ and test/ splits of (rows, side, side, 1) uint8 images: pixel p of a row with label y is
// gen() % noise + stripe * y on every other image row. Same seed, same file.
struct StripedImages {
  int side = 10;
  int classes = 4;
  int64_t train_rows = 64, test_rows = 16;
  uint64_t seed = 9;
  int noise = 100, stripe = 30;
  bool norm_attributes = false;  // norm_mean = norm_std = 0.3
};

inline std::string write_striped_images(const std::string& path, const StripedImages& s) {
  std::mt19937_64 gen(s.seed);
  const int64_t pixels = static_cast<int64_t>(s.side) * s.side;
  H5Id file = create_h5_file(path);
  for (auto [group, n] :
       {std::pair<std::string, int64_t>{"train", s.train_rows}, {"test", s.test_rows}}) {
    std::vector<uint8_t> x(static_cast<size_t>(n * pixels));
    std::vector<int32_t> y(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      y[i] = static_cast<int32_t>(gen() % s.classes);
      for (int64_t q = 0; q < pixels; ++q)
        x[i * pixels + q] =
            static_cast<uint8_t>((gen() % s.noise) + s.stripe * y[i] * ((q / s.side) % 2));
    }
    write_h5_dataset(file.get(), group + "/images", {n, s.side, s.side, 1}, x);
    write_h5_dataset(file.get(), group + "/labels", {n}, y);
  }
  write_h5_attr_int(file.get(), "num_classes", s.classes);
  if (s.norm_attributes) {
    write_h5_attr_double(file.get(), "norm_mean", 0.3);
    write_h5_attr_double(file.get(), "norm_std", 0.3);
  }
  return path;
}

// One plain SGD step of three micro-batches of 16 on striped images, with a small CNN. SGD moves
// each weight by lr times its gradient, so the step's update compares the gradients; one Adam step
// would move every weight by about lr whatever its gradient, and a gradient near 0 whose sign
// rounding flips would fail the comparison spuriously.
inline TrainConfig one_step(const std::string& data, DeviceKind device, Precision precision) {
  TrainConfig c;
  c.train.path = data;
  c.model = "conv3x3:8,relu,maxpool2,flatten,dense:16,relu,dense";
  c.optimizer.kind = OptimizerKind::sgd;
  c.lr = 0.1;
  c.global_batch = 48;
  c.grad_accum = 3;
  c.steps = 1;
  c.seed = 4;
  c.eval_every_epoch = false;
  c.print = false;
  c.device = device;
  c.precision = precision;
  return c;
}

// Five updates of three micro-batches each (64 rows make an epoch of a full step and one of 16
// rows), a bucket per layer (several all-reduces a step, each starting while the backward pass
// goes on), momentum and clipping: every part of the device step that one plain step leaves out.
inline TrainConfig several_steps(const std::string& data, DeviceKind device) {
  TrainConfig c = one_step(data, device, Precision::fp32);
  c.optimizer.kind = OptimizerKind::momentum;
  c.lr = 0.05;
  c.steps = 5;
  c.bucket_mb = 1e-6;
  c.clip_norm = 0.5;
  c.check_every = 2;
  return c;
}

inline double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    norm += double(b[i]) * b[i];
  }
  return std::sqrt(diff / norm);
}

// Elements whose bits differ (and any length difference).
inline size_t differing(const std::vector<float>& a, const std::vector<float>& b) {
  size_t n = a.size() > b.size() ? a.size() - b.size() : b.size() - a.size();
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    n += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return n;
}

// A trainer's parameters tensor by tensor, without the layout's gaps: comparable between layouts
// (--zero 1 pads each layer to the ranks).
// --gather-dtype bf16's contract (zero.h), element by element: how many of `used` (the parameters
// a model computes with) are not the bf16 rounding, to nearest with ties to even, of the same
// element of `masters`; and how many masters are not bf16 values themselves (fp32 masters kept,
// not rounded ones).
struct Bf16Rounding {
  size_t not_rounding = 0, unrounded_masters = 0;
};
inline Bf16Rounding bf16_rounding(const std::vector<float>& used,
                                  const std::vector<float>& masters) {
  Bf16Rounding r;
  for (size_t i = 0; i < used.size() && i < masters.size(); ++i) {
    uint32_t u, m;
    std::memcpy(&u, &used[i], 4);
    std::memcpy(&m, &masters[i], 4);
    if ((m & 0xffffu) != 0) ++r.unrounded_masters;
    if (((m + 0x7fffu + ((m >> 16) & 1u)) & 0xffff0000u) != u) ++r.not_rounding;
  }
  if (used.size() != masters.size()) r.not_rounding += 1;
  return r;
}

inline std::vector<float> params_by_tensor(Trainer& t) {
  const std::vector<float> flat = t.model().params_to_host();
  std::vector<float> out;
  for (const ParamTensorInfo& p : t.model().param_tensors())
    out.insert(out.end(), flat.begin() + static_cast<ptrdiff_t>(p.offset),
               flat.begin() + static_cast<ptrdiff_t>(p.offset + p.count));
  return out;
}

// What a finished run leaves to compare: its parameters, result, counts and wall time.
struct Trained {
  std::vector<float> params;
  TrainResult result;
  int64_t updates = 0, captured = 0, skipped = 0;
  double seconds = 0;
};

inline Trained train(Communicator& host, Communicator& grads, const TrainConfig& c) {
  const auto start = std::chrono::steady_clock::now();
  Trainer t(host, grads, c);
  Trained r;
  r.result = t.run();
  r.params = t.model().params_to_host();
  r.updates = t.optimizer().steps();
  r.captured = t.captured_steps();
  r.skipped = t.guard().skipped_steps();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

// Two runs that must be the same bits: parameters, update count, every epoch's losses, the final
// test score.
inline void expect_same_bits(const Trained& got, const Trained& want) {
  EXPECT_EQ(0u, differing(got.params, want.params)) << "of " << want.params.size() << " parameters";
  EXPECT_EQ(got.updates, want.updates);
  ASSERT_EQ(got.result.epochs.size(), want.result.epochs.size());
  for (size_t e = 0; e < want.result.epochs.size(); ++e) {
    EXPECT_EQ(got.result.epochs[e].train_loss, want.result.epochs[e].train_loss)
        << "epoch " << e + 1;
    EXPECT_EQ(got.result.epochs[e].test.loss, want.result.epochs[e].test.loss) << "epoch " << e + 1;
  }
  EXPECT_EQ(got.result.test.loss, want.result.test.loss);
  EXPECT_EQ(got.result.test.accuracy, want.result.test.accuracy);
}

}  // namespace lockstep::testing_util
