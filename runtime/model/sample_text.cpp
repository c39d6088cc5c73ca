#include "runtime/model/sample_text.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/cuda/memory.h"
#include "kernels/gpt/decode.h"
#include "runtime/base/buffer.h"
#include "runtime/model/gpt_decoder.h"

namespace lockstep {

int pick_token(const float* logits, int vocab, const SampleOptions& o, std::mt19937_64& rng) {
  if (o.temperature == 0.0)
    return static_cast<int>(std::max_element(logits, logits + vocab) - logits);
  std::vector<int> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  const int k = o.top_k > 0 ? std::min(o.top_k, vocab) : vocab;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
  std::vector<double> weight(static_cast<size_t>(k));
  double total = 0;
  for (int i = 0; i < k; ++i) {
    weight[i] =
        std::exp((static_cast<double>(logits[order[i]]) - logits[order[0]]) / o.temperature);
    total += weight[i];
  }
  const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53 * total;
  double sum = 0;
  for (int i = 0; i < k; ++i) {
    sum += weight[i];
    if (u < sum) return order[i];
  }
  return order[k - 1];
}

namespace {

// On the CPU, while the text fits the context: one position per token through the key/value cache.
// Returns the tokens generated; stops early when the window slides (every position's embedding
// changes then, so the cache no longer holds the window).
int generate_with_cache(Model& model, int ctx, std::vector<int>& text, int count,
                        const SampleOptions& options, std::mt19937_64& rng,
                        const std::function<void(int)>& emit) {
  GptDecoder decoder(model);
  const float* logits = nullptr;
  for (int token : text) logits = decoder.step(token);
  int done = 0;
  while (done < count) {
    const int next = pick_token(logits, decoder.vocab(), options, rng);
    text.push_back(next);
    emit(next);
    ++done;
    if (static_cast<int>(text.size()) > ctx) break;  // `next` would land past the context
    if (done < count) logits = decoder.step(next);
  }
  return done;
}

}  // namespace

void generate_tokens(Model& model, int ctx, int vocab, std::vector<int>& text, int count,
                     const SampleOptions& options, std::mt19937_64& rng,
                     const std::function<void(int)>& emit) {
  if (static_cast<int>(text.size()) > ctx) text.erase(text.begin(), text.end() - ctx);
  const bool on_gpu = model.device() == DeviceKind::cuda;
  // The GPU's cache decoder holds a head's scores in shared memory: up to kDecodeMaxContext
  // positions; a longer context runs the model over the window for every token.
  const int cached = on_gpu && ctx > kernels::kDecodeMaxContext
                         ? 0
                         : generate_with_cache(model, ctx, text, count, options, rng, emit);
  // Past the context: the model over the whole window, zeros after it, for every token.
  Buffer<float> input(model.device(), static_cast<size_t>(ctx));
  std::vector<float> x(static_cast<size_t>(ctx)), logits(static_cast<size_t>(vocab));
  for (int step = cached; step < count; ++step) {
    if (static_cast<int>(text.size()) > ctx) text.erase(text.begin());
    const int n = static_cast<int>(text.size());
    std::fill(x.begin(), x.end(), 0.0f);
    for (int i = 0; i < n; ++i) x[i] = static_cast<float>(text[i]);
    input.write(x.data(), 0, x.size());
    const float* out = model.forward(input.data(), 1) + static_cast<size_t>(n - 1) * vocab;
    if (on_gpu)
      kernels::cuda_copy_to_host(logits.data(), out, logits.size() * sizeof(float));
    else
      std::copy(out, out + vocab, logits.begin());
    const int next = pick_token(logits.data(), vocab, options, rng);
    text.push_back(next);
    if (static_cast<int>(text.size()) > ctx) text.erase(text.begin());
    emit(next);
  }
}

}  // namespace lockstep
