// Text from a GPT: the next token from one position's logits (greedy, or sampled with a
// temperature among the top k), and a model continuing a text a token at a time. Shared by
// lockstep-generate and lockstep-train --sample-every.
//
// pick_token: temperature 0 takes the largest logit (the lowest id on a tie); otherwise
// softmax(logits / temperature) over the top_k largest (0: all; ties by id) is sampled with one
// draw of `rng` (its top 53 bits as a uniform number in [0, 1): the same token on every platform).
// generate_tokens: `model` takes `ctx` token ids (as floats) per sample and gives `vocab` logits
// at each of the ctx positions (a gpt: model as lockstep-train builds it, on either device); each
// step appends the token picked at the last position of the newest ctx tokens of `text`, then
// calls emit(token). The positions go through a key/value cache on the model's device
// (gpt_decoder.h: one position's work per token), the whole window again for every token only once
// it slides past ctx. Used by one thread; a GPU model's activations are overwritten. No collective
// calls: every rank that calls it with the same parameters, text and generator gets the same
// tokens.
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "runtime/model/model.h"

namespace lockstep {

struct SampleOptions {
  double temperature = 1.0;
  int top_k = 0;
};

int pick_token(const float* logits, int vocab, const SampleOptions& options, std::mt19937_64& rng);

void generate_tokens(Model& model, int ctx, int vocab, std::vector<int>& text, int count,
                     const SampleOptions& options, std::mt19937_64& rng,
                     const std::function<void(int)>& emit);

}  // namespace lockstep
