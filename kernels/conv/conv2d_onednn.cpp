#include <array>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "kernels/conv/conv2d.h"
#include "kernels/onednn/util.h"

// The oneDNN twin of conv2d_*_cpu. With NHWC activations (the default Conv2dIo) the primitives
// are first asked for the caller's layouts as they are (weights: format_tag::any): where oneDNN
// has a fast kernel for them (on AVX-512, brgconv and jit:avx512_core), no activation is
// reordered; that was 8% of the CNN's step on one core (reorders 2.4 ms of 16.5, 2026-11-26).
// Where it would take its reference kernel (100x slower), the activations are format_tag::any
// too, so it picks the layouts its fastest kernels want (on AVX2 the channel-blocked nChw8c, whose
// direct convolution runs about twice as fast as im2col + sgemm at the CNN's shapes), and the
// caller's buffers are reordered into them and back (Staged), a memory pass per operand. With
// c_in == 1 the NHWC input is byte for byte the NCHW one oneDNN's first-layer kernel takes, so it
// is described as NCHW and needs no reorder; that layer always lets oneDNN choose its output's
// layout. With an activation in 16-channel blocks (Conv2dIo) the activations are format_tag::any,
// and with the input in blocks the algorithm is convolution_auto: on AVX-512 oneDNN then takes
// Winograd for the CNN's second convolution at batches of 16 or more (forward, input and weight
// gradient 1.86 + 2.18 + 2.25 ms against the direct kernel's 2.36 + 2.41 + 2.53 in the same
// layout and 2.55 + 2.58 + 2.75 on NHWC, batch 64, one thread, 2026-11-26). Gradients: dx is
// overwritten; dw and db are computed into the entry's buffers and added into the caller's by the
// reorder (the accumulate contract).

namespace lockstep::kernels {

namespace {

using dnnl::memory;
using onednn::Staged;
using Tag = memory::format_tag;
constexpr auto f32 = memory::data_type::f32;

std::array<long, 15> key_of(const Conv2dShape& s, bool bias, Conv2dIo io) {
  return {s.n,     s.h,     s.w,  s.c_in, s.c_out,        s.kh,           s.kw,     s.stride,
          s.pad_h, s.pad_w, bias, s.relu, io.x_blocked16, io.y_blocked16, io.direct};
}

void require_blocks(int channels, const char* operand, const char* who) {
  if (channels % 16 != 0)
    throw std::invalid_argument(std::string(who) + ": " + operand +
                                " in 16-channel blocks needs a multiple of 16 channels, not " +
                                std::to_string(channels));
}

// The forward primitive's attributes: the user's scratchpad, and the fused ReLU as a post-op.
dnnl::primitive_attr forward_attr(const Conv2dShape& s) {
  dnnl::primitive_attr attr = onednn::user_scratchpad();
  if (s.relu) {
    dnnl::post_ops ops;
    ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
    attr.set_post_ops(ops);
  }
  return attr;
}

// The caller's layouts of a shape (Conv2dIo) and the layouts the primitives are created with: the
// caller's for the activations unless `any` (forced by a blocked activation or c_in == 1), then
// format_tag::any like the weights, and the algorithm oneDNN's choice unless io.direct.
struct Layouts {
  memory::desc x, w, b, y, any_x, any_w, any_y, none;
  memory::dims strides, pad_l, pad_r;
  dnnl::algorithm algorithm = dnnl::algorithm::convolution_direct;
  Layouts(const Conv2dShape& s, Conv2dIo io, bool any, const char* who) {
    const Conv2dGeometry g = conv2d_geometry(s, who);
    if (io.x_blocked16) require_blocks(s.c_in, "an input", who);
    if (io.y_blocked16) require_blocks(s.c_out, "an output", who);
    const memory::dims xd{s.n, s.c_in, s.h, s.w}, wd{s.c_out, s.c_in, s.kh, s.kw},
        yd{s.n, s.c_out, g.out_h, g.out_w};
    x = memory::desc(xd, f32, io.x_blocked16 ? Tag::aBcd16b : s.c_in == 1 ? Tag::nchw : Tag::nhwc);
    w = memory::desc(wd, f32, Tag::hwio);
    b = memory::desc({s.c_out}, f32, Tag::a);
    y = memory::desc(yd, f32, io.y_blocked16 ? Tag::aBcd16b : Tag::nhwc);
    any = any || io.x_blocked16 || io.y_blocked16 || s.c_in == 1;
    any_x = any ? memory::desc(xd, f32, Tag::any) : x;
    any_w = memory::desc(wd, f32, Tag::any);
    any_y = any ? memory::desc(yd, f32, Tag::any) : y;
    // Not for a one-channel input (x NCHW): oneDNN would take Winograd for it too, over the
    // input padded to 16 channels (4x slower than the direct kernel, the CNN's first layer).
    if (io.x_blocked16 && !io.direct) algorithm = dnnl::algorithm::convolution_auto;
    strides = {s.stride, s.stride};
    pad_l = {s.pad_h, s.pad_w};
    // The far padding that makes the output exactly out_h x out_w (rows the stride does not reach
    // are dropped, as the CPU twin's floor does).
    pad_r = {(g.out_h - 1) * s.stride + s.kh - s.h - s.pad_h,
             (g.out_w - 1) * s.stride + s.kw - s.w - s.pad_w};
  }
  dnnl::convolution_forward::primitive_desc forward(bool bias,
                                                    const dnnl::primitive_attr& attr) const {
    dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_training, algorithm, any_x, any_w,
                                      bias ? b : none, any_y, strides, pad_l, pad_r);
    return {d, attr, onednn::engine()};
  }
};

struct Forward {
  dnnl::convolution_forward prim;
  Staged x, w, b, y;
  memory scratch;
};

struct BackwardData {
  dnnl::convolution_backward_data prim;
  Staged dy, w, dx;
  memory scratch;
};

struct BackwardWeights {
  dnnl::convolution_backward_weights prim;
  Staged x, dy, dw, db;
  memory scratch;
};

// oneDNN's reference kernels name themselves "ref:...".
template <class Pd>
bool is_reference(const Pd& pd) {
  return std::string(pd.impl_info_str()).rfind("ref", 0) == 0;
}

// Each primitive with the caller's activation layouts (any = false), unless that gives a
// reference kernel; then with the layouts oneDNN picks (any = true).
Forward make_forward(const Conv2dShape& s, bool bias, Conv2dIo io) {
  for (bool any : {false, true}) {
    const Layouts l(s, io, any, "conv2d_forward_onednn");
    auto pd = l.forward(bias, forward_attr(s));
    if (!any && is_reference(pd)) continue;
    Forward f{dnnl::convolution_forward(pd),
              Staged(Staged::Role::input, l.x, pd.src_desc()),
              Staged(Staged::Role::input, l.w, pd.weights_desc()),
              Staged(),
              Staged(Staged::Role::output, l.y, pd.dst_desc()),
              memory(pd.scratchpad_desc(), onednn::engine())};
    if (bias) f.b = Staged(Staged::Role::input, l.b, pd.bias_desc());
    return f;
  }
  throw std::logic_error("conv2d_forward_onednn: no layouts");
}

BackwardData make_backward_data(const Conv2dShape& s, Conv2dIo io) {
  for (bool any : {false, true}) {
    const Layouts l(s, io, any, "conv2d_backward_onednn");
    dnnl::convolution_backward_data::desc d(l.algorithm, l.any_x, l.any_w, l.any_y, l.strides,
                                            l.pad_l, l.pad_r);
    dnnl::convolution_backward_data::primitive_desc pd(d, onednn::user_scratchpad(),
                                                       onednn::engine(), l.forward(false, {}));
    if (!any && is_reference(pd)) continue;
    return {dnnl::convolution_backward_data(pd),
            Staged(Staged::Role::input, l.y, pd.diff_dst_desc()),
            Staged(Staged::Role::input, l.w, pd.weights_desc()),
            Staged(Staged::Role::output, l.x, pd.diff_src_desc()),
            memory(pd.scratchpad_desc(), onednn::engine())};
  }
  throw std::logic_error("conv2d_backward_onednn: no layouts");
}

BackwardWeights make_backward_weights(const Conv2dShape& s, bool bias, Conv2dIo io) {
  for (bool any : {false, true}) {
    const Layouts l(s, io, any, "conv2d_backward_onednn");
    dnnl::convolution_backward_weights::desc d(l.algorithm, l.any_x, l.any_w, bias ? l.b : l.none,
                                               l.any_y, l.strides, l.pad_l, l.pad_r);
    dnnl::convolution_backward_weights::primitive_desc pd(d, onednn::user_scratchpad(),
                                                          onednn::engine(), l.forward(bias, {}));
    if (!any && is_reference(pd)) continue;
    BackwardWeights b{dnnl::convolution_backward_weights(pd),
                      Staged(Staged::Role::input, l.x, pd.src_desc()),
                      Staged(Staged::Role::input, l.y, pd.diff_dst_desc()),
                      Staged(Staged::Role::accumulate, l.w, pd.diff_weights_desc()),
                      Staged(),
                      memory(pd.scratchpad_desc(), onednn::engine())};
    if (bias) b.db = Staged(Staged::Role::accumulate, l.b, pd.diff_bias_desc());
    return b;
  }
  throw std::logic_error("conv2d_backward_onednn: no layouts");
}

Forward& forward_entry(const Conv2dShape& s, bool bias, Conv2dIo io) {
  return onednn::cached<Forward>(key_of(s, bias, io), [&] { return make_forward(s, bias, io); });
}
BackwardWeights& backward_weights_entry(const Conv2dShape& s, bool bias, Conv2dIo io) {
  return onednn::cached<BackwardWeights>(key_of(s, bias, io),
                                         [&] { return make_backward_weights(s, bias, io); });
}
BackwardData& backward_data_entry(const Conv2dShape& s, Conv2dIo io) {
  return onednn::cached<BackwardData>(key_of(s, false, io),
                                      [&] { return make_backward_data(s, io); });
}

}  // namespace

bool conv2d_onednn_blocked16(const Conv2dShape& s, Conv2dIo io) {
  if ((io.x_blocked16 && (s.c_in % 16 != 0)) || (io.y_blocked16 && s.c_out % 16 != 0)) return false;
  if (!io.x_blocked16 && !io.y_blocked16) return true;
  try {
    // Chosen by oneDNN itself: no pass reorders a blocked operand.
    const Forward& f = forward_entry(s, true, io);
    const BackwardWeights& bw = backward_weights_entry(s, true, io);
    bool chosen = !(io.x_blocked16 && (f.x.reorders() || bw.x.reorders())) &&
                  !(io.y_blocked16 && (f.y.reorders() || bw.dy.reorders()));
    if (s.c_in > 1) {
      const BackwardData& bd = backward_data_entry(s, io);
      chosen =
          chosen && !(io.x_blocked16 && bd.dx.reorders()) && !(io.y_blocked16 && bd.dy.reorders());
    }
    return chosen;
  } catch (const dnnl::error& e) {
    onednn::rethrow("conv2d_onednn_blocked16", e);
  }
}

void conv2d_forward_onednn(const Conv2dShape& s, const float* x, const float* w, const float* b,
                           float* y, Conv2dIo io) {
  const Conv2dGeometry g = conv2d_geometry(s, "conv2d_forward_onednn");
  if (g.rows == 0) return;
  try {
    const bool bias = b != nullptr;
    Forward& f = forward_entry(s, bias, io);
    dnnl::stream& st = onednn::stream();
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, f.x.in(x)},
                                         {DNNL_ARG_WEIGHTS, f.w.in(w)},
                                         {DNNL_ARG_DST, f.y.out(y)},
                                         {DNNL_ARG_SCRATCHPAD, f.scratch}};
    if (bias) args.emplace(DNNL_ARG_BIAS, f.b.in(b));
    f.prim.execute(st, args);
    f.y.finish();
    st.wait();
  } catch (const dnnl::error& e) {
    onednn::rethrow("conv2d_forward_onednn", e);
  }
}

void conv2d_backward_onednn(const Conv2dShape& s, const float* x, const float* w, const float* dy,
                            float* dx, float* dw, float* db, Conv2dIo io) {
  const Conv2dGeometry g = conv2d_geometry(s, "conv2d_backward_onednn");
  if (g.rows == 0) return;
  try {
    dnnl::stream& st = onednn::stream();
    if (dw != nullptr) {
      const bool bias = db != nullptr;
      BackwardWeights& b = backward_weights_entry(s, bias, io);
      std::unordered_map<int, memory> args{{DNNL_ARG_SRC, b.x.in(x)},
                                           {DNNL_ARG_DIFF_DST, b.dy.in(dy)},
                                           {DNNL_ARG_DIFF_WEIGHTS, b.dw.out(dw)},
                                           {DNNL_ARG_SCRATCHPAD, b.scratch}};
      if (bias) args.emplace(DNNL_ARG_DIFF_BIAS, b.db.out(db));
      b.prim.execute(st, args);
      b.dw.finish();
      if (bias) b.db.finish();
    } else if (db != nullptr) {
      // The bias gradient alone: dy's sum over the positions, per channel (channel j of row m
      // sits at m * c_out + j in NHWC, and in block j / 16 of image m / (out_h * out_w) blocked).
      const size_t plane = static_cast<size_t>(g.out_h) * g.out_w;
      for (size_t m = 0; m < g.rows; ++m)
        for (int j = 0; j < s.c_out; ++j)
          db[j] +=
              io.y_blocked16
                  ? dy[((m / plane * (s.c_out / 16) + j / 16) * plane + m % plane) * 16 + j % 16]
                  : dy[m * s.c_out + j];
    }
    if (dx != nullptr) {
      BackwardData& d = backward_data_entry(s, io);
      d.prim.execute(st, {{DNNL_ARG_DIFF_DST, d.dy.in(dy)},
                          {DNNL_ARG_WEIGHTS, d.w.in(w)},
                          {DNNL_ARG_DIFF_SRC, d.dx.out(dx)},
                          {DNNL_ARG_SCRATCHPAD, d.scratch}});
      d.dx.finish();
    }
    st.wait();
  } catch (const dnnl::error& e) {
    onednn::rethrow("conv2d_backward_onednn", e);
  }
}

}  // namespace lockstep::kernels
