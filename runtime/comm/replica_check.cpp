#include "runtime/comm/replica_check.h"

#include <cstdint>
#include <cstring>

#include "runtime/base/error.h"

namespace lockstep {
namespace {

constexpr uint64_t kP1 = 0x9E3779B185EBCA87ull, kP2 = 0xC2B2AE3D27D4EB4Full,
                   kP3 = 0x165667B19E3779F9ull, kP4 = 0x85EBCA77C2B2AE63ull;

uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

// One word into an accumulator: a multiply spreads its bits upward, the rotation brings the high
// ones down for the next multiply.
uint64_t round(uint64_t acc, uint64_t w) { return rotl(acc + w * kP2, 31) * kP1; }

uint64_t fold(uint64_t h, uint64_t v) { return rotl(h ^ round(0, v), 27) * kP1 + kP4; }

}  // namespace

uint64_t checksum64(const void* data, size_t bytes) {
  // Four lanes of 8-byte words (the multiplies of one lane overlap those of the others), folded
  // with the tail and the length, then mixed so that every input bit reaches every output bit.
  // Words are read with memcpy: any alignment, and equal bytes give equal sums on every rank.
  uint64_t lane[4] = {kP1 + kP2, kP2, 0, 0 - kP1};
  const auto* p = static_cast<const unsigned char*>(data);
  size_t i = 0;
  for (; i + 32 <= bytes; i += 32) {
    uint64_t w[4];
    std::memcpy(w, p + i, sizeof w);
    for (int k = 0; k < 4; ++k) lane[k] = round(lane[k], w[k]);
  }
  for (int k = 0; i + 8 <= bytes; i += 8, ++k) {
    uint64_t w;
    std::memcpy(&w, p + i, sizeof w);
    lane[k] = round(lane[k], w);
  }
  uint64_t tail = 0;
  std::memcpy(&tail, p + i, bytes - i);
  uint64_t h = static_cast<uint64_t>(bytes) * kP3;
  for (uint64_t l : lane) h = fold(h, l);
  h = fold(h, tail);
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  return h ^ (h >> 32);
}

void check_replicas(Communicator& comm, const std::vector<float>& params, const std::string& when) {
  int64_t mine = static_cast<int64_t>(checksum64(params.data(), params.size() * sizeof(float)));
  std::vector<int64_t> all(static_cast<size_t>(comm.size()));
  comm.all_gather(&mine, all.data(), 1, DType::i64);
  std::string bad;
  for (size_t r = 1; r < all.size(); ++r)
    if (all[r] != all[0]) {
      if (!bad.empty()) bad += ", ";
      bad += std::to_string(r);
    }
  if (!bad.empty())
    throw Error("replica check failed " + when + ": the parameters of rank(s) " + bad +
                " differ from rank 0's (checksums of the flat parameter buffer disagree); the "
                "ranks no longer train the same model");
}

}  // namespace lockstep
