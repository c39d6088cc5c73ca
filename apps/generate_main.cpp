// lockstep-generate: text from a trained byte-level GPT (a checkpoint of a gpt: model), sampled a
// byte at a time and streamed to stdout as each is produced:
//
//   lockstep-generate --checkpoint ckpt/ --prompt "The " --tokens 200 --temperature 0.8 --top-k 40
//
// Each byte comes from the model's distribution at the last position of the text so far (the
// prompt, then what was generated; the newest ctx bytes once it is longer than the model's
// context): --temperature 0 takes the most likely byte (the lowest such byte on a tie), otherwise
// softmax(logits / temperature) over the --top-k most likely bytes (0: all) is sampled with a
// generator seeded by --seed, so the same seed gives the same text (runtime/model/sample_text.h:
// on the CPU a key/value cache while the text fits the context). stdout carries the generated
// bytes alone (the prompt is not repeated); a summary goes to stderr.
// The model's tokens must be bytes: a vocabulary over 256 is refused, and so is a prompt byte at or
// above a smaller vocabulary (its generated tokens are below it, so each fits a byte).
// One process; exit 2 for bad input (not a GPT checkpoint, bad option values), 1 at run time.
#include <boost/program_options.hpp>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "apps/checkpoint_model.h"
#include "apps/tool_options.h"
#include "runtime/base/error.h"
#include "runtime/model/sample_text.h"
#include "runtime/process/bootstrap.h"
#include "runtime/process/device.h"
#include "runtime/train/checkpoint.h"

namespace {

using lockstep::UsageError;
namespace po = boost::program_options;

struct Options {
  std::string checkpoint, prompt = "\n", device = "cpu";
  int tokens = 256, top_k = 0;
  double temperature = 1.0;
  uint64_t seed = 0;
};

int run(int argc, char** argv, const lockstep::World& world) {
  Options o;
  po::options_description options("lockstep-generate options");
  // clang-format off
  options.add_options()("checkpoint", po::value(&o.checkpoint)->required(),
                        "checkpoint of a gpt: model: a file, or a folder (its newest)")(
      "prompt", po::value(&o.prompt)->default_value(o.prompt, "\"\\n\""),
      "the text to continue (bytes; the default is a newline)")(
      "tokens", po::value(&o.tokens)->default_value(o.tokens), "bytes to generate")(
      "temperature", po::value(&o.temperature)->default_value(o.temperature),
      "softmax temperature; 0: always the most likely byte")(
      "top-k", po::value(&o.top_k)->default_value(o.top_k),
      "sample among the K most likely bytes (0: all)")(
      "seed", po::value(&o.seed)->default_value(o.seed), "the sampling generator's seed")(
      "device", po::value(&o.device)->default_value(o.device), "cpu, cuda or auto");
  // clang-format on
  po::variables_map vm;
  if (!lockstep::apps::parse_tool_options(
          "lockstep-generate",
          "lockstep-generate --checkpoint CKPT [--prompt TEXT] [--tokens N] [--temperature T] "
          "[--top-k K] [--seed S] [--device D]",
          options, argc, argv, world, vm))
    return 0;
  lockstep::apps::require_one_process("lockstep-generate", world);
  if (o.tokens < 0) throw UsageError("--tokens must be >= 0");
  if (o.top_k < 0) throw UsageError("--top-k must be >= 0 (0: all bytes)");
  if (!(o.temperature >= 0.0) || !std::isfinite(o.temperature))
    throw UsageError("--temperature must be a finite number >= 0");
  if (o.prompt.empty()) throw UsageError("--prompt must not be empty (the default is a newline)");

  const std::string path = lockstep::resolve_checkpoint(o.checkpoint);
  const lockstep::CheckpointState state = lockstep::load_checkpoint(path);
  const lockstep::NamedTensor *wte = nullptr, *wpe = nullptr;
  for (const lockstep::NamedTensor& t : state.params) {
    if (t.name.rfind("embed", 0) != 0 || t.shape.size() != 2) continue;
    if (t.name.size() > 4 && t.name.compare(t.name.size() - 4, 4, ".wte") == 0) wte = &t;
    if (t.name.size() > 4 && t.name.compare(t.name.size() - 4, 4, ".wpe") == 0) wpe = &t;
  }
  if (wte == nullptr || wpe == nullptr)
    throw UsageError(path + ": model " + state.model_spec +
                     " is not a GPT (lockstep-generate needs a checkpoint of a gpt: model)");
  const int vocab = static_cast<int>(wte->shape[0]), ctx = static_cast<int>(wpe->shape[0]);
  // Tokens are bytes both ways (the prompt's bytes go in, each generated token goes out as one
  // byte), so a larger vocabulary would have its tokens cut to bytes on stdout, and a prompt byte
  // outside a smaller one is not a token the model knows: both refused before generating anything.
  if (vocab > 256)
    throw UsageError("lockstep-generate writes bytes: the checkpoint's model has a vocabulary of " +
                     std::to_string(vocab) + " tokens, not at most 256; lockstep-predict gives " +
                     "the next tokens of " + path + " (model " + state.model_spec + ") as ids");
  for (size_t i = 0; i < o.prompt.size(); ++i) {
    const int byte = static_cast<unsigned char>(o.prompt[i]);
    if (byte >= vocab)
      throw UsageError("--prompt holds byte " + std::to_string(byte) + " at position " +
                       std::to_string(i) + ", outside the checkpoint's vocabulary of " +
                       std::to_string(vocab) + " tokens (bytes 0 to " + std::to_string(vocab - 1) +
                       ")");
  }

  lockstep::ModelPlacement place;
  const lockstep::DeviceChoice choice = lockstep::choose_device(o.device, world);
  lockstep::activate_device(choice);
  place.device = choice.kind;
  const auto model =
      lockstep::apps::model_from_checkpoint(state, path, {ctx}, vocab, 1, place, ctx);
  const bool on_gpu = place.device == lockstep::DeviceKind::cuda;
  std::vector<int> text(o.prompt.begin(), o.prompt.end());
  for (int& c : text) c = static_cast<unsigned char>(c);
  std::mt19937_64 rng(o.seed);
  const auto start = std::chrono::steady_clock::now();
  lockstep::generate_tokens(*model, ctx, vocab, text, o.tokens, {o.temperature, o.top_k}, rng,
                            [](int token) {
                              std::fputc(token, stdout);
                              std::fflush(stdout);
                            });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr,
               "\nlockstep-generate: %d bytes from %s (model %s, step %lld) in %.2f s, %.1f "
               "bytes/s on %s\n",
               o.tokens, path.c_str(), state.model_spec.c_str(),
               static_cast<long long>(state.global_step), seconds,
               seconds > 0 ? o.tokens / seconds : 0.0, on_gpu ? "cuda" : "cpu");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return lockstep::run_app(argc, argv, [&](const lockstep::World& world, lockstep::Communicator&) {
    return run(argc, argv, world);
  });
}
