// gpt_kernels_dump OUT.h5: runs each GPT kernel's CPU twin (GELU, layer norm, embedding, causal
// attention, and loss.h's cross-entropy over [B*T, 256] byte logits) forward and backward on seeded
// random inputs, and writes inputs, outputs and gradients to one HDF5 file, one group per kernel,
// for scripts/reference/gpt_kernels_torch.py to recompute with PyTorch (tests/
// gpt_kernels_torch_test.sh). Parameter gradients start from zero, so the file holds one pass's
// gradient. No MPI: a plain program over the kernels and the HDF5 writer.
#include <cstdint>
#include <cstdio>
#include <exception>
#include <random>
#include <string>
#include <vector>

#include "kernels/gpt/attention.h"
#include "kernels/gpt/embedding.h"
#include "kernels/gpt/gelu.h"
#include "kernels/gpt/layernorm.h"
#include "kernels/step/loss.h"
#include "runtime/data/h5_writer.h"

namespace {

using lockstep::H5Id;
using Floats = std::vector<float>;
namespace lk = lockstep::kernels;

std::mt19937 rng(20261122);

Floats uniform(size_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> d(lo, hi);
  Floats v(n);
  for (float& x : v) x = d(rng);
  return v;
}

std::vector<int64_t> dims(std::initializer_list<int64_t> d) { return d; }

template <class T>
void put(hid_t g, const std::string& name, std::initializer_list<int64_t> shape,
         const std::vector<T>& v) {
  lockstep::write_h5_dataset(g, name, dims(shape), v);
}

void gelu(hid_t file) {
  const int64_t n = 4096;
  const Floats x = uniform(n, -6.0f, 6.0f), dy = uniform(n);
  Floats y(n), dx(n);
  lk::gelu_forward_cpu(x.data(), y.data(), n);
  lk::gelu_backward_cpu(x.data(), dy.data(), dx.data(), n);
  H5Id g = lockstep::ensure_h5_group(file, "gelu");
  put(g.get(), "x", {n}, x), put(g.get(), "y", {n}, y);
  put(g.get(), "dy", {n}, dy), put(g.get(), "dx", {n}, dx);
}

void layernorm(hid_t file) {
  const lk::LayerNormShape s{128, 96};
  const int64_t R = s.rows, D = s.dim;
  const Floats x = uniform(R * D, -3.0f, 5.0f), gamma = uniform(D, 0.5f, 1.5f), beta = uniform(D),
               dy = uniform(R * D);
  Floats y(R * D), mean(R), rstd(R), dx(R * D), dgamma(D, 0.0f), dbeta(D, 0.0f);
  lk::layernorm_forward_cpu(s, x.data(), gamma.data(), beta.data(), y.data(), mean.data(),
                            rstd.data());
  lk::layernorm_backward_cpu(s, x.data(), gamma.data(), mean.data(), rstd.data(), dy.data(),
                             dx.data(), dgamma.data(), dbeta.data());
  H5Id g = lockstep::ensure_h5_group(file, "layernorm");
  put(g.get(), "x", {R, D}, x), put(g.get(), "gamma", {D}, gamma), put(g.get(), "beta", {D}, beta);
  put(g.get(), "y", {R, D}, y), put(g.get(), "mean", {R}, mean), put(g.get(), "rstd", {R}, rstd);
  put(g.get(), "dy", {R, D}, dy), put(g.get(), "dx", {R, D}, dx);
  put(g.get(), "dgamma", {D}, dgamma), put(g.get(), "dbeta", {D}, dbeta);
}

void embedding(hid_t file) {
  const lk::EmbeddingShape s{.batch = 4, .seq = 32, .vocab = 256, .max_seq = 48, .dim = 64};
  const int64_t B = s.batch, T = s.seq, V = s.vocab, P = s.max_seq, C = s.dim;
  std::uniform_int_distribution<int32_t> byte(0, 40);  // few distinct tokens: many repeats
  std::vector<int32_t> tok(B * T);
  for (auto& t : tok) t = byte(rng) * 6;
  const Floats wte = uniform(V * C), wpe = uniform(P * C), dout = uniform(B * T * C);
  Floats out(B * T * C), dwte(V * C, 0.0f), dwpe(P * C, 0.0f);
  lk::embedding_forward_cpu(s, tok.data(), wte.data(), wpe.data(), out.data());
  lk::embedding_backward_cpu(s, tok.data(), dout.data(), dwte.data(), dwpe.data());
  H5Id g = lockstep::ensure_h5_group(file, "embedding");
  put(g.get(), "tokens", {B, T}, tok), put(g.get(), "wte", {V, C}, wte);
  put(g.get(), "wpe", {P, C}, wpe), put(g.get(), "out", {B, T, C}, out);
  put(g.get(), "dout", {B, T, C}, dout), put(g.get(), "dwte", {V, C}, dwte);
  put(g.get(), "dwpe", {P, C}, dwpe);
}

void attention(hid_t file) {
  const lk::AttentionShape s{4, 32, 4, 16};
  const int64_t B = s.batch, T = s.seq, H = s.heads, C = s.channels();
  const Floats qkv = uniform(B * T * 3 * C, -2.0f, 2.0f), dout = uniform(B * T * C);
  Floats out(B * T * C), heads(lk::attention_heads_floats(s)), probs(lk::attention_probs_floats(s)),
      work(lk::attention_workspace_floats(s)), dqkv(B * T * 3 * C);
  lk::attention_forward_cpu(s, qkv.data(), out.data(), heads.data(), probs.data(), work.data());
  lk::attention_backward_cpu(s, dout.data(), heads.data(), probs.data(), dqkv.data(), work.data());
  H5Id g = lockstep::ensure_h5_group(file, "attention");
  lockstep::write_h5_attr_int(g.get(), "heads", H);
  put(g.get(), "qkv", {B, T, 3 * C}, qkv), put(g.get(), "out", {B, T, C}, out);
  put(g.get(), "probs", {B, H, T, T}, probs), put(g.get(), "dout", {B, T, C}, dout);
  put(g.get(), "dqkv", {B, T, 3 * C}, dqkv);
}

void cross_entropy(hid_t file) {
  const int64_t B = 4, T = 32, V = 256, N = B * T;
  const Floats logits = uniform(N * V, -4.0f, 4.0f);
  std::uniform_int_distribution<int32_t> byte(0, V - 1);
  std::vector<int32_t> next(N);
  for (auto& t : next) t = byte(rng);
  Floats dlogits(N * V);
  const lk::LossTotals t = lk::softmax_cross_entropy_cpu(
      logits.data(), next.data(), nullptr, static_cast<int>(N), static_cast<int>(V),
      1.0f / static_cast<float>(N), dlogits.data());
  H5Id g = lockstep::ensure_h5_group(file, "cross_entropy");
  put(g.get(), "logits", {B, T, V}, logits), put(g.get(), "targets", {B, T}, next);
  put(g.get(), "dlogits", {B, T, V}, dlogits);
  lockstep::write_h5_attr_double(g.get(), "mean_loss", t.loss_sum / static_cast<double>(N));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: gpt_kernels_dump OUT.h5\n");
    return 2;
  }
  try {
    H5Id file = lockstep::create_h5_file(argv[1]);
    gelu(file.get());
    layernorm(file.get());
    embedding(file.get());
    attention(file.get());
    cross_entropy(file.get());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  std::printf("wrote %s\n", argv[1]);
  return 0;
}
