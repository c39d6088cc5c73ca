// Reader for IDX files, the format of MNIST and Fashion-MNIST (as shipped by Debian's
// dataset-fashion-mnist package: gzip-compressed *-idx3-ubyte.gz / *-idx1-ubyte.gz). zlib's gzopen
// reads gzip-compressed and plain files alike.
//
// Layout: a 4-byte magic {0, 0, type, ndims}, then ndims big-endian uint32 dimensions, then the
// row-major data. Only unsigned-byte data (type 0x08) is supported, as in every MNIST-style set.
// Everything in the file is checked before it is trusted: the magic, the number of dimensions,
// non-zero dimensions of sane total size, and a data length that matches the header exactly. A
// file that fails is a UsageError naming it and saying what is wrong; the reader never reads past
// what the file holds, and a lying header cannot make it allocate more than the file delivers.
// Stateless; any thread.
// No collective calls.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lockstep {

struct IdxArray {
  std::vector<int64_t> dims;  // e.g. {60000, 28, 28} for images, {60000} for labels
  std::vector<uint8_t> data;  // product(dims) bytes, row-major
};

// Largest data section accepted (a header asking for more is refused as corrupt).
constexpr int64_t kMaxIdxBytes = int64_t{1} << 34;

// Reads and validates `path`. expected_ndims > 0 also requires that many dimensions (3 for image
// files, 1 for label files).
IdxArray read_idx(const std::string& path, int expected_ndims = 0);

}  // namespace lockstep
