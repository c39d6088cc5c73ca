#include <array>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "kernels/conv2d.h"
#include "kernels/onednn_util.h"

// The oneDNN twin of conv2d_*_cpu. The primitives are first asked for the caller's NHWC
// activations as they are (weights: format_tag::any): where oneDNN has a fast kernel for them (on
// AVX-512, brgconv and jit:avx512_core), no activation is reordered; that was 8% of the CNN's step
// on one core (reorders 2.4 ms of 16.5, 2026-11-26). Where it would take its reference kernel
// (100x slower), the activations are format_tag::any too, so it picks the layouts its fastest
// kernels want (on AVX2 the channel-blocked nChw8c, whose direct convolution runs about twice as
// fast as im2col + sgemm at the CNN's shapes), and the caller's buffers are reordered into them
// and back (Staged), a memory pass per operand. With c_in == 1 the NHWC input is byte for byte
// the NCHW one oneDNN's first-layer kernel takes, so it is described as NCHW and needs no
// reorder; that layer always lets oneDNN choose its output's layout. Gradients: dx is overwritten; dw and db are computed into the
// entry's buffers and added into the caller's by the reorder (the accumulate contract).

namespace lockstep::kernels {

namespace {

using dnnl::memory;
using onednn::Staged;
using Tag = memory::format_tag;
constexpr auto f32 = memory::data_type::f32;
constexpr auto direct = dnnl::algorithm::convolution_direct;

std::array<long, 12> key_of(const Conv2dShape& s, bool bias) {
  return {s.n, s.h, s.w, s.c_in, s.c_out, s.kh, s.kw, s.stride, s.pad_h, s.pad_w, bias, s.relu};
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

// The caller's layouts of a shape and the layouts the primitives are created with: the caller's
// for the activations unless `blocked` (or c_in == 1), then format_tag::any like the weights.
struct Layouts {
  memory::desc x, w, b, y, any_x, any_w, any_y, none;
  memory::dims strides, pad_l, pad_r;
  Layouts(const Conv2dShape& s, bool blocked) {
    const Conv2dGeometry g = conv2d_geometry(s, "conv2d_onednn");
    const memory::dims xd{s.n, s.c_in, s.h, s.w}, wd{s.c_out, s.c_in, s.kh, s.kw},
        yd{s.n, s.c_out, g.out_h, g.out_w};
    x = memory::desc(xd, f32, s.c_in == 1 ? Tag::nchw : Tag::nhwc);
    w = memory::desc(wd, f32, Tag::hwio);
    b = memory::desc({s.c_out}, f32, Tag::a);
    y = memory::desc(yd, f32, Tag::nhwc);
    const bool any = blocked || s.c_in == 1;
    any_x = any ? memory::desc(xd, f32, Tag::any) : x;
    any_w = memory::desc(wd, f32, Tag::any);
    any_y = any ? memory::desc(yd, f32, Tag::any) : y;
    strides = {s.stride, s.stride};
    pad_l = {s.pad_h, s.pad_w};
    // The far padding that makes the output exactly out_h x out_w (rows the stride does not reach
    // are dropped, as the CPU twin's floor does).
    pad_r = {(g.out_h - 1) * s.stride + s.kh - s.h - s.pad_h,
             (g.out_w - 1) * s.stride + s.kw - s.w - s.pad_w};
  }
  dnnl::convolution_forward::primitive_desc forward(bool bias, const dnnl::primitive_attr& attr) const {
    dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_training, direct, any_x, any_w,
                                      bias ? b : none, any_y, strides, pad_l, pad_r);
    return {d, attr, onednn::engine()};
  }
};

struct Forward {
  dnnl::convolution_forward prim;
  Staged x, w, b, y;
  memory scratch;
  memory::desc dst;  // the layout the primitive writes
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
  memory::desc diff_dst;  // the layout the primitive reads dy in
};

// oneDNN's reference kernels name themselves "ref:...".
template <class Pd>
bool is_reference(const Pd& pd) {
  return std::string(pd.impl_info_str()).rfind("ref", 0) == 0;
}

// Each primitive with the caller's activation layouts (blocked = false), unless that gives a
// reference kernel; then with the layouts oneDNN picks (blocked = true).
Forward make_forward(const Conv2dShape& s, bool bias) {
  for (bool blocked : {false, true}) {
    const Layouts l(s, blocked);
    auto pd = l.forward(bias, forward_attr(s));
    if (!blocked && is_reference(pd)) continue;
    Forward f{dnnl::convolution_forward(pd), Staged(Staged::Role::input, l.x, pd.src_desc()),
              Staged(Staged::Role::input, l.w, pd.weights_desc()), Staged(),
              Staged(Staged::Role::output, l.y, pd.dst_desc()),
              memory(pd.scratchpad_desc(), onednn::engine()), pd.dst_desc()};
    if (bias) f.b = Staged(Staged::Role::input, l.b, pd.bias_desc());
    return f;
  }
  throw std::logic_error("conv2d_forward_onednn: no layouts");
}

BackwardData make_backward_data(const Conv2dShape& s) {
  for (bool blocked : {false, true}) {
    const Layouts l(s, blocked);
    dnnl::convolution_backward_data::desc d(direct, l.any_x, l.any_w, l.any_y, l.strides,
                                            l.pad_l, l.pad_r);
    dnnl::convolution_backward_data::primitive_desc pd(d, onednn::user_scratchpad(),
                                                       onednn::engine(), l.forward(false, {}));
    if (!blocked && is_reference(pd)) continue;
    return {dnnl::convolution_backward_data(pd),
            Staged(Staged::Role::input, l.y, pd.diff_dst_desc()),
            Staged(Staged::Role::input, l.w, pd.weights_desc()),
            Staged(Staged::Role::output, l.x, pd.diff_src_desc()),
            memory(pd.scratchpad_desc(), onednn::engine())};
  }
  throw std::logic_error("conv2d_backward_onednn: no layouts");
}

BackwardWeights make_backward_weights(const Conv2dShape& s, bool bias) {
  for (bool blocked : {false, true}) {
    const Layouts l(s, blocked);
    dnnl::convolution_backward_weights::desc d(direct, l.any_x, l.any_w, bias ? l.b : l.none,
                                               l.any_y, l.strides, l.pad_l, l.pad_r);
    dnnl::convolution_backward_weights::primitive_desc pd(d, onednn::user_scratchpad(),
                                                          onednn::engine(), l.forward(bias, {}));
    if (!blocked && is_reference(pd)) continue;
    BackwardWeights b{dnnl::convolution_backward_weights(pd),
                      Staged(Staged::Role::input, l.x, pd.src_desc()),
                      Staged(Staged::Role::input, l.y, pd.diff_dst_desc()),
                      Staged(Staged::Role::accumulate, l.w, pd.diff_weights_desc()), Staged(),
                      memory(pd.scratchpad_desc(), onednn::engine()), pd.diff_dst_desc()};
    if (bias) b.db = Staged(Staged::Role::accumulate, l.b, pd.diff_bias_desc());
    return b;
  }
  throw std::logic_error("conv2d_backward_onednn: no layouts");
}

Forward& forward_entry(const Conv2dShape& s, bool bias) {
  return onednn::cached<Forward>(key_of(s, bias), [&] { return make_forward(s, bias); });
}
BackwardWeights& backward_weights_entry(const Conv2dShape& s, bool bias) {
  return onednn::cached<BackwardWeights>(key_of(s, bias),
                                         [&] { return make_backward_weights(s, bias); });
}

// The activations' layout blocked by 16 channels (aBcd16b, "nChw16c") for a shape's output.
memory::desc blocked16(const Conv2dShape& s) {
  const Conv2dGeometry g = conv2d_geometry(s, "conv2d_onednn_blocked16");
  return memory::desc({s.n, s.c_out, g.out_h, g.out_w}, f32, Tag::aBcd16b);
}

void require_blocked16(const Conv2dShape& s, const char* who) {
  if (!conv2d_onednn_blocked16(s))
    throw std::logic_error(std::string(who) +
                           ": oneDNN does not lay this convolution's output out in 16-channel "
                           "blocks; check conv2d_onednn_blocked16() first");
}

}  // namespace

bool conv2d_onednn_blocked16(const Conv2dShape& s) {
  if (s.relu || s.c_out % 16 != 0) return false;
  try {
    const memory::desc want = blocked16(s);
    return forward_entry(s, true).dst == want && backward_weights_entry(s, true).diff_dst == want;
  } catch (const dnnl::error& e) {
    onednn::rethrow("conv2d_onednn_blocked16", e);
  }
}

void conv2d_forward_onednn_blocked16(const Conv2dShape& s, const float* x, const float* w,
                                     const float* b, float* y_blocked) {
  const Conv2dGeometry g = conv2d_geometry(s, "conv2d_forward_onednn_blocked16");
  if (g.rows == 0) return;
  require_blocked16(s, "conv2d_forward_onednn_blocked16");
  try {
    Forward& f = forward_entry(s, true);
    dnnl::stream& st = onednn::stream();
    memory y(f.dst, onednn::engine(), y_blocked);
    f.prim.execute(st, {{DNNL_ARG_SRC, f.x.in(x)},
                        {DNNL_ARG_WEIGHTS, f.w.in(w)},
                        {DNNL_ARG_BIAS, f.b.in(b)},
                        {DNNL_ARG_DST, y},
                        {DNNL_ARG_SCRATCHPAD, f.scratch}});
    st.wait();
  } catch (const dnnl::error& e) {
    onednn::rethrow("conv2d_forward_onednn_blocked16", e);
  }
}

void conv2d_backward_weights_onednn_blocked16(const Conv2dShape& s, const float* x,
                                              const float* dy_blocked, float* dw, float* db) {
  const Conv2dGeometry g = conv2d_geometry(s, "conv2d_backward_weights_onednn_blocked16");
  if (g.rows == 0) return;
  require_blocked16(s, "conv2d_backward_weights_onednn_blocked16");
  try {
    BackwardWeights& b = backward_weights_entry(s, true);
    dnnl::stream& st = onednn::stream();
    memory dy(b.diff_dst, onednn::engine(), const_cast<float*>(dy_blocked));
    b.prim.execute(st, {{DNNL_ARG_SRC, b.x.in(x)},
                        {DNNL_ARG_DIFF_DST, dy},
                        {DNNL_ARG_DIFF_WEIGHTS, b.dw.out(dw)},
                        {DNNL_ARG_DIFF_BIAS, b.db.out(db)},
                        {DNNL_ARG_SCRATCHPAD, b.scratch}});
    b.dw.finish();
    b.db.finish();
    st.wait();
  } catch (const dnnl::error& e) {
    onednn::rethrow("conv2d_backward_weights_onednn_blocked16", e);
  }
}

void conv2d_forward_onednn(const Conv2dShape& s, const float* x, const float* w, const float* b,
                           float* y) {
  const Conv2dGeometry g = conv2d_geometry(s, "conv2d_forward_onednn");
  if (g.rows == 0) return;
  try {
    const bool bias = b != nullptr;
    Forward& f = forward_entry(s, bias);
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
                            float* dx, float* dw, float* db) {
  const Conv2dGeometry g = conv2d_geometry(s, "conv2d_backward_onednn");
  if (g.rows == 0) return;
  try {
    dnnl::stream& st = onednn::stream();
    if (dw != nullptr) {
      const bool bias = db != nullptr;
      BackwardWeights& b = backward_weights_entry(s, bias);
      std::unordered_map<int, memory> args{{DNNL_ARG_SRC, b.x.in(x)},
                                           {DNNL_ARG_DIFF_DST, b.dy.in(dy)},
                                           {DNNL_ARG_DIFF_WEIGHTS, b.dw.out(dw)},
                                           {DNNL_ARG_SCRATCHPAD, b.scratch}};
      if (bias) args.emplace(DNNL_ARG_DIFF_BIAS, b.db.out(db));
      b.prim.execute(st, args);
      b.dw.finish();
      if (bias) b.db.finish();
    } else if (db != nullptr) {
      for (size_t m = 0; m < g.rows; ++m)
        for (int j = 0; j < s.c_out; ++j) db[j] += dy[m * s.c_out + j];
    }
    if (dx != nullptr) {
      BackwardData& d = onednn::cached<BackwardData>(key_of(s, false),
                                                     [&] { return make_backward_data(s); });
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
