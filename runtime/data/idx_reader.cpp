#include "runtime/data/idx_reader.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>

#include "runtime/base/error.h"

namespace lockstep {
namespace {

constexpr unsigned kUnsignedByte = 0x08;
constexpr unsigned kReadPiece = 1u << 20;

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzHandle = std::unique_ptr<std::remove_pointer_t<gzFile>, GzCloser>;

[[noreturn]] void bad(const std::string& path, const std::string& what) {
  throw UsageError(path + ": not a valid IDX file: " + what);
}

// Reads up to `n` bytes; returns how many arrived (fewer only at the end of the data). A damaged
// compressed stream is an error naming the file.
size_t read_some(gzFile f, const std::string& path, uint8_t* out, size_t n) {
  size_t got = 0;
  while (got < n) {
    unsigned want = static_cast<unsigned>(std::min<size_t>(n - got, kReadPiece));
    int r = gzread(f, out + got, want);
    if (r < 0) {
      int code = 0;
      const char* msg = gzerror(f, &code);
      bad(path, std::string("cannot decompress (") + (msg != nullptr ? msg : "zlib error") + ")");
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  return got;
}

}  // namespace

IdxArray read_idx(const std::string& path, int expected_ndims) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) throw UsageError(path + ": no such file");
  GzHandle f(gzopen(path.c_str(), "rb"));
  if (!f) throw UsageError(path + ": cannot be opened (" + std::strerror(errno) + ")");

  uint8_t magic[4] = {};
  if (read_some(f.get(), path, magic, 4) != 4) bad(path, "shorter than the 4-byte magic number");
  if (magic[0] != 0 || magic[1] != 0)
    bad(path, "the magic number does not start with two zero bytes");
  if (magic[2] != kUnsignedByte)
    bad(path, "element type code " + std::to_string(magic[2]) +
                  " (only unsigned bytes, 8, are supported)");
  const int ndims = magic[3];
  if (ndims < 1 || ndims > 4) bad(path, std::to_string(ndims) + " dimensions (1 to 4 expected)");
  if (expected_ndims > 0 && ndims != expected_ndims)
    bad(path, std::to_string(ndims) + " dimensions where " + std::to_string(expected_ndims) +
                  " are expected (an image file has 3, a label file 1)");

  IdxArray out;
  int64_t total = 1;
  for (int i = 0; i < ndims; ++i) {
    uint8_t b[4] = {};
    if (read_some(f.get(), path, b, 4) != 4) bad(path, "the header ends inside the dimensions");
    const int64_t d = (int64_t{b[0]} << 24) | (int64_t{b[1]} << 16) | (int64_t{b[2]} << 8) | b[3];
    if (d == 0) bad(path, "dimension " + std::to_string(i) + " is zero");
    if (d > kMaxIdxBytes / total) bad(path, "the header announces more than 16 GiB of data");
    total *= d;
    out.dims.push_back(d);
  }

  // Grow with what arrives instead of trusting the header with one large allocation.
  const auto want = static_cast<size_t>(total);
  out.data.resize(std::min<size_t>(want, size_t{64} << 20));
  size_t have = 0;
  while (true) {
    have += read_some(f.get(), path, out.data.data() + have, out.data.size() - have);
    if (have < out.data.size() || have == want) break;
    out.data.resize(std::min(want, out.data.size() * 2));
  }
  if (have < want)
    bad(path, "truncated: the header announces " + std::to_string(want) +
                  " data bytes, the file holds " + std::to_string(have));
  uint8_t extra = 0;
  if (read_some(f.get(), path, &extra, 1) != 0)
    bad(path, "longer than its header announces (" + std::to_string(want) + " data bytes)");
  return out;
}

}  // namespace lockstep
