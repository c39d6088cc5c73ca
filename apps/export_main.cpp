// lockstep-export: a checkpoint's parameters as one safetensors file, under the names and in the
// layouts of the PyTorch reference modules (scripts/reference/), so that load_state_dict on them
// gives Lockstep's logits:
//
//   lockstep-export --checkpoint ckpt/ --out model.safetensors
//
// Names and layouts: gpt:... models as gpt_torch.Gpt (wte, wpe, blocks.<i>.<tensor>, ln_f.<tensor>;
// the head is tied to wte), the "cnn" preset as cnn_torch.Cnn (conv1, conv2, dense), a stack of
// dense and relu layers ending in dense (linear, mlp:...) as mlp_torch.Mlp (layers.<k>, the k-th
// dense layer); any other model keeps Lockstep's layer names ("conv0.weight"). Everywhere a dense
// weight, stored (in, out) by Lockstep so that y = x W + b, becomes nn.Linear's (out, in), and a
// convolution's HWIO weight becomes nn.Conv2d's OIHW. The file
// (https://github.com/huggingface/safetensors: an 8-byte little-endian header length, a JSON header
// naming each tensor's dtype, shape and byte range, then the raw little-endian data) is written by
// the small writer below, to a temporary name renamed into place when complete; metadata: format
// "pt", lockstep_model (the spec), lockstep_step (the checkpoint's global step). One process; exit
// 2 for bad input (a missing or damaged checkpoint, tensors that do not fit the model it records,
// an output that exists), 1 when the file system refuses.
#include <bit>
#include <boost/program_options.hpp>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <system_error>
#include <vector>

#include "apps/checkpoint_model.h"
#include "apps/tool_options.h"
#include "runtime/base/error.h"
#include "runtime/model/model_spec.h"
#include "runtime/process/bootstrap.h"
#include "runtime/train/checkpoint.h"

namespace {

using lockstep::Error;
using lockstep::NamedTensor;
using lockstep::UsageError;
namespace po = boost::program_options;
static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

// "block12.attn.qkv.weight" -> {"block", 12, "attn.qkv.weight"}; a name without that form gives
// an empty type.
struct LayerName {
  std::string type;
  int index = -1;
  std::string tensor;
};
LayerName split_name(const std::string& name) {
  const size_t dot = name.find('.');
  if (dot == std::string::npos) return {};
  size_t digits = dot;
  while (digits > 0 && std::isdigit(static_cast<unsigned char>(name[digits - 1]))) --digits;
  if (digits == dot || digits == 0) return {};
  return {name.substr(0, digits), std::stoi(name.substr(digits, dot - digits)),
          name.substr(dot + 1)};
}

// (rows, cols) -> (cols, rows).
NamedTensor transposed(const NamedTensor& t) {
  const size_t rows = static_cast<size_t>(t.shape[0]), cols = static_cast<size_t>(t.shape[1]);
  NamedTensor out{t.name, {t.shape[1], t.shape[0]}, std::vector<float>(t.data.size())};
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < cols; ++c) out.data[c * rows + r] = t.data[r * cols + c];
  return out;
}

// HWIO (K, K, in, out) -> OIHW (out, in, K, K).
NamedTensor oihw(const NamedTensor& t) {
  const size_t kh = static_cast<size_t>(t.shape[0]), kw = static_cast<size_t>(t.shape[1]),
               in = static_cast<size_t>(t.shape[2]), out = static_cast<size_t>(t.shape[3]);
  NamedTensor r{
      t.name, {t.shape[3], t.shape[2], t.shape[0], t.shape[1]}, std::vector<float>(t.data.size())};
  for (size_t h = 0; h < kh; ++h)
    for (size_t w = 0; w < kw; ++w)
      for (size_t i = 0; i < in; ++i)
        for (size_t o = 0; o < out; ++o)
          r.data[((o * in + i) * kh + h) * kw + w] = t.data[((h * kw + w) * in + i) * out + o];
  return r;
}

// The checkpoint's parameters renamed and laid out as the reference module's state_dict.
std::vector<NamedTensor> torch_tensors(const lockstep::CheckpointState& state) {
  // Checkpoints hold the canonical spec (every layer spelled out): the GPT by its embedding layer,
  // the CNN preset by its canonical text.
  bool gpt = false;
  for (const NamedTensor& p : state.params) gpt = gpt || split_name(p.name).type == "embed";
  const bool cnn = state.model_spec == lockstep::to_string(lockstep::parse_model_spec("cnn"));
  // A dense/relu stack ending in dense (the linear and mlp presets, or any such list) as
  // mlp_torch.Mlp: its k-th dense layer is layers.<k>.
  bool mlp = !gpt && !cnn;
  const lockstep::ModelSpec spec = lockstep::parse_model_spec(state.model_spec);
  for (const lockstep::LayerSpec& l : spec.layers)
    mlp = mlp && (l.type == "dense" || l.type == "relu");
  mlp = mlp && !spec.layers.empty() && spec.layers.back().type == "dense";
  std::vector<NamedTensor> out;
  int first_block = -1, convs = 0, last_conv = -1, denses = -1, last_dense = -1;
  for (const NamedTensor& p : state.params) {
    const LayerName n = split_name(p.name);
    NamedTensor t = p;
    if ((n.type == "dense" || n.type == "block") && p.shape.size() == 2 && n.tensor.size() >= 6 &&
        n.tensor.compare(n.tensor.size() - 6, 6, "weight") == 0)
      t = transposed(p);
    if (n.type == "conv" && p.shape.size() == 4) t = oihw(p);
    if (gpt && n.type == "embed") {
      t.name = n.tensor;  // wte, wpe
    } else if (gpt && n.type == "block") {
      if (first_block < 0) first_block = n.index;
      t.name = "blocks." + std::to_string(n.index - first_block) + "." + n.tensor;
    } else if (gpt && n.type == "lmhead") {
      t.name = n.tensor.rfind("ln.", 0) == 0 ? "ln_f." + n.tensor.substr(3) : n.tensor;
    } else if (cnn && n.type == "conv") {
      if (n.index != last_conv) ++convs, last_conv = n.index;
      t.name = "conv" + std::to_string(convs) + "." + n.tensor;
    } else if (cnn && n.type == "dense") {
      t.name = "dense." + n.tensor;
    } else if (mlp && n.type == "dense") {
      if (n.index != last_dense) ++denses, last_dense = n.index;
      t.name = "layers." + std::to_string(denses) + "." + n.tensor;
    }
    out.push_back(std::move(t));
  }
  return out;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\u%04x", c);
      out += esc;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// The safetensors header: each tensor's dtype, shape and byte range in order, then the metadata;
// padded with spaces to a multiple of 8 bytes (so the data that follows is aligned).
std::string header(const std::vector<NamedTensor>& tensors,
                   const std::vector<std::pair<std::string, std::string>>& metadata) {
  std::string h = "{\"__metadata__\":{";
  for (size_t i = 0; i < metadata.size(); ++i) {
    if (i > 0) h += ',';
    h += json_string(metadata[i].first);
    h += ':';
    h += json_string(metadata[i].second);
  }
  h += "}";
  size_t offset = 0;
  for (const NamedTensor& t : tensors) {
    h += ',';
    h += json_string(t.name);
    h += ":{\"dtype\":\"F32\",\"shape\":[";
    for (size_t d = 0; d < t.shape.size(); ++d) {
      if (d > 0) h += ',';
      h += std::to_string(t.shape[d]);
    }
    const size_t bytes = t.data.size() * sizeof(float);
    h += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + bytes) +
         "]}";
    offset += bytes;
  }
  h += "}";
  h.append((8 - h.size() % 8) % 8, ' ');
  return h;
}

void write_safetensors(const std::string& out, const std::vector<NamedTensor>& tensors,
                       const std::vector<std::pair<std::string, std::string>>& metadata) {
  const std::string tmp = out + ".tmp";
  const std::string h = header(tensors, metadata);
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) throw Error(out + ": cannot create " + tmp);
    const uint64_t size = h.size();
    f.write(reinterpret_cast<const char*>(&size), sizeof size);
    f.write(h.data(), static_cast<std::streamsize>(h.size()));
    for (const NamedTensor& t : tensors)
      f.write(reinterpret_cast<const char*>(t.data.data()),
              static_cast<std::streamsize>(t.data.size() * sizeof(float)));
    f.flush();
    if (!f) {
      std::error_code ec;
      std::filesystem::remove(tmp, ec);
      throw Error(out + ": writing " + tmp + " failed (disk full?)");
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, out, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    throw Error(out + ": cannot move the finished file into place");
  }
}

int run(int argc, char** argv, const lockstep::World& world) {
  std::string checkpoint, out;
  po::options_description options("lockstep-export options");
  // clang-format off
  options.add_options()("checkpoint", po::value(&checkpoint)->required(),
                        "checkpoint file, or a folder (its newest checkpoint)")(
      "out", po::value(&out)->required(), "the safetensors file to write (must not exist)");
  // clang-format on
  po::variables_map vm;
  if (!lockstep::apps::parse_tool_options(
          "lockstep-export", "lockstep-export --checkpoint CKPT --out MODEL.safetensors", options,
          argc, argv, world, vm))
    return 0;
  lockstep::apps::require_one_process("lockstep-export", world);
  lockstep::apps::require_new_output("lockstep-export", out);
  const std::string path = lockstep::resolve_checkpoint(checkpoint);
  const lockstep::CheckpointState state = lockstep::load_checkpoint(path);
  // Tensors that do not fit the recorded model (an edited checkpoint) would fail only in
  // load_state_dict: refused here, naming the tensor.
  lockstep::apps::check_checkpoint_tensors(state, path);
  const std::vector<NamedTensor> tensors = torch_tensors(state);
  write_safetensors(out, tensors,
                    {{"format", "pt"},
                     {"lockstep_model", state.model_spec},
                     {"lockstep_step", std::to_string(state.global_step)}});
  size_t values = 0;
  for (const NamedTensor& t : tensors) values += t.data.size();
  std::cout << "lockstep-export: " << path << " (model " << state.model_spec << ", step "
            << state.global_step << ") -> " << out << ": " << tensors.size() << " tensors, "
            << values << " parameters\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return lockstep::run_app(argc, argv, [&](const lockstep::World& world, lockstep::Communicator&) {
    return run(argc, argv, world);
  });
}
