#include "apps/bench_args.h"

#include <cctype>
#include <cstdio>
#include <limits>
#include <sstream>

#include "apps/option_hint.h"
#include "runtime/base/error.h"

namespace lockstep::bench {

namespace po = boost::program_options;

size_t parse_bytes(const std::string& text, const std::string& flag) {
  auto bad = [&](const std::string& why) {
    return UsageError(flag + " '" + text + "' is not a byte size: " + why +
                      " (write 8, 1K, 64M or 2G; K, M, G are powers of 1024)");
  };
  size_t pos = 0;
  size_t value = 0;
  constexpr size_t kMax = std::numeric_limits<size_t>::max();
  while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) {
    size_t digit = static_cast<size_t>(text[pos] - '0');
    if (value > (kMax - digit) / 10) throw bad("too large");
    value = value * 10 + digit;
    ++pos;
  }
  if (pos == 0) throw bad("it does not start with a number");
  std::string unit = text.substr(pos);
  for (char& ch : unit) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  int shift = 0;
  if (!unit.empty() && (unit[0] == 'K' || unit[0] == 'M' || unit[0] == 'G' || unit[0] == 'T')) {
    shift = unit[0] == 'K' ? 10 : unit[0] == 'M' ? 20 : unit[0] == 'G' ? 30 : 40;
    unit.erase(0, 1);
  }
  if (unit == "IB" && shift > 0) unit.clear();
  if (unit == "B") unit.clear();
  if (!unit.empty()) throw bad("unknown unit '" + text.substr(pos) + "'");
  if (shift > 0 && value > (kMax >> shift)) throw bad("too large");
  return value << shift;
}

std::string format_bytes(size_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (unit < 4 && bytes >= 1024 && bytes % 1024 == 0) {
    bytes /= 1024;
    ++unit;
  }
  return std::to_string(bytes) + " " + kUnits[unit];
}

std::vector<size_t> size_series(size_t min_bytes, size_t max_bytes, size_t factor) {
  if (min_bytes < 1) throw UsageError("-b/--minbytes must be at least 1 byte");
  if (max_bytes < min_bytes)
    throw UsageError("-e/--maxbytes (" + format_bytes(max_bytes) + ") is below -b/--minbytes (" +
                     format_bytes(min_bytes) + ")");
  if (factor < 2) throw UsageError("-f/--stepfactor must be 2 or more");
  std::vector<size_t> sizes;
  for (size_t s = min_bytes;; s *= factor) {
    sizes.push_back(s);
    if (s > max_bytes / factor) break;  // the next size would pass max (or overflow)
  }
  return sizes;
}

DType parse_dtype(const std::string& text) {
  struct Name {
    const char* name;
    DType type;
  };
  static const Name kNames[] = {
      {"float32", DType::f32},   {"f32", DType::f32},   {"float", DType::f32},
      {"float64", DType::f64},   {"f64", DType::f64},   {"double", DType::f64},
      {"bfloat16", DType::bf16}, {"bf16", DType::bf16}, {"float16", DType::f16},
      {"f16", DType::f16},       {"half", DType::f16},  {"int32", DType::i32},
      {"i32", DType::i32},       {"int64", DType::i64}, {"i64", DType::i64},
      {"uint8", DType::u8},      {"u8", DType::u8},
  };
  for (const Name& n : kNames)
    if (text == n.name) return n.type;
  throw UsageError("--dtype '" + text + "' is not an element type (use " + dtype_choices() + ")");
}

std::string dtype_choices() { return "float32, float64, bfloat16, float16, int32, int64 or uint8"; }

ReduceOp parse_op(const std::string& text) {
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean, ReduceOp::max, ReduceOp::min})
    if (text == reduce_op_name(op)) return op;
  throw UsageError("--op '" + text + "' is not a reduction (use sum, mean, max or min)");
}

po::variables_map parse_options(const std::string& command, int argc, char** argv,
                                const po::options_description& options) {
  po::variables_map vm;
  try {
    // No positional description: a stray word is an error, not silently ignored.
    po::positional_options_description none;
    po::store(po::command_line_parser(argc, argv).options(options).positional(none).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw UsageError("lockstep-bench " + command + ": " + apps::option_error_text(e, options) +
                     " (see lockstep-bench " + command + " --help)");
  }
  return vm;
}

bool print_help_if_asked(const po::variables_map& vm, const po::options_description& options,
                         int rank) {
  if (vm.count("help") == 0) return false;
  if (rank == 0) {
    std::ostringstream os;
    os << options;
    std::fputs(os.str().c_str(), stdout);
  }
  return true;
}

}  // namespace lockstep::bench
