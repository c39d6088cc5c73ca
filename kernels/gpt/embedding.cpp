#include "kernels/gpt/embedding.h"

#include <stdexcept>
#include <string>

namespace lockstep::kernels {

void check_embedding_shape(const EmbeddingShape& s, const char* who) {
  if (s.batch < 0 || s.seq <= 0 || s.seq > s.max_seq || s.vocab <= 0 || s.dim <= 0)
    throw std::invalid_argument(std::string(who) +
                                ": batch must be >= 0, 0 < seq <= max_seq and vocab, dim > 0");
}

void tokens_from_floats_cpu(const float* x, int32_t* tokens, size_t n, int vocab) {
  for (size_t i = 0; i < n; ++i) {
    const float v = x[i];
    const bool whole = v >= 0.0f && v < static_cast<float>(vocab) &&
                       v == static_cast<float>(static_cast<int32_t>(v));
    if (!whole)
      throw std::out_of_range("tokens_from_floats_cpu: input " + std::to_string(v) + " at " +
                              std::to_string(i) + " is not a token id in [0, " +
                              std::to_string(vocab) + ")");
    tokens[i] = static_cast<int32_t>(v);
  }
}

namespace {

int32_t checked_token(const EmbeddingShape& s, const int32_t* tokens, size_t i, const char* who) {
  const int32_t tok = tokens[i];
  if (tok < 0 || tok >= s.vocab)
    throw std::out_of_range(std::string(who) + ": token " + std::to_string(tok) + " at row " +
                            std::to_string(i / s.seq) + ", position " + std::to_string(i % s.seq) +
                            " is outside [0, " + std::to_string(s.vocab) + ")");
  return tok;
}

}  // namespace

void embedding_forward_cpu(const EmbeddingShape& s, const int32_t* tokens, const float* wte,
                           const float* wpe, float* out) {
  check_embedding_shape(s, "embedding_forward_cpu");
  const size_t positions = static_cast<size_t>(s.batch) * s.seq;
  for (size_t i = 0; i < positions; ++i) {
    const int32_t tok = checked_token(s, tokens, i, "embedding_forward_cpu");
    const float* e = wte + static_cast<size_t>(tok) * s.dim;
    const float* p = wpe + (i % s.seq) * s.dim;
    float* o = out + i * s.dim;
    for (int j = 0; j < s.dim; ++j) o[j] = e[j] + p[j];
  }
}

void embedding_backward_cpu(const EmbeddingShape& s, const int32_t* tokens, const float* dout,
                            float* dwte, float* dwpe) {
  check_embedding_shape(s, "embedding_backward_cpu");
  const size_t positions = static_cast<size_t>(s.batch) * s.seq;
  for (size_t i = 0; i < positions; ++i) {
    const int32_t tok = checked_token(s, tokens, i, "embedding_backward_cpu");
    const float* g = dout + i * s.dim;
    if (dwte != nullptr) {
      float* e = dwte + static_cast<size_t>(tok) * s.dim;
      for (int j = 0; j < s.dim; ++j) e[j] += g[j];
    }
    if (dwpe != nullptr) {
      float* p = dwpe + (i % s.seq) * s.dim;
      for (int j = 0; j < s.dim; ++j) p[j] += g[j];
    }
  }
}

}  // namespace lockstep::kernels
