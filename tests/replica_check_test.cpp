// The replica check's checksum (comm/replica_check.h): equal bytes, equal sums; a flipped bit
// anywhere, two words swapped or one more byte changes the sum. And the check itself on one rank.
#include "runtime/comm/replica_check.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <set>
#include <vector>

#include "solo_communicator.h"

using namespace lockstep;

namespace {

std::vector<unsigned char> bytes(size_t n) {
  std::vector<unsigned char> b(n);
  uint64_t x = 88172645463325252ull;
  for (auto& c : b) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    c = static_cast<unsigned char>(x);
  }
  return b;
}

}  // namespace

TEST(Checksum, EqualBytesGiveEqualSumsWhateverTheirAddress) {
  const auto a = bytes(1003);
  std::vector<unsigned char> shifted(a.size() + 3);
  std::memcpy(shifted.data() + 3, a.data(), a.size());  // not 8-byte aligned
  EXPECT_EQ(checksum64(a.data(), a.size()), checksum64(shifted.data() + 3, a.size()));
}

TEST(Checksum, EveryFlippedBitChangesTheSum) {
  // Sizes across the 32-byte blocks, the 8-byte words after them and the tail bytes.
  for (size_t n : {size_t{1}, size_t{7}, size_t{8}, size_t{31}, size_t{33}, size_t{1003}}) {
    auto b = bytes(n);
    const uint64_t sum = checksum64(b.data(), n);
    std::set<uint64_t> seen{sum};
    for (size_t i = 0; i < n; ++i) {
      for (int bit = 0; bit < 8; ++bit) {
        b[i] ^= static_cast<unsigned char>(1u << bit);
        seen.insert(checksum64(b.data(), n));
        b[i] ^= static_cast<unsigned char>(1u << bit);
      }
    }
    EXPECT_EQ(8 * n + 1, seen.size()) << n << " bytes: two bit flips gave one sum";
  }
}

TEST(Checksum, OrderAndLengthCount) {
  auto b = bytes(256);
  const uint64_t sum = checksum64(b.data(), b.size());
  std::vector<unsigned char> swapped = b;
  std::memcpy(swapped.data(), b.data() + 8, 8);  // words 0 and 1 swapped
  std::memcpy(swapped.data() + 8, b.data(), 8);
  EXPECT_NE(sum, checksum64(swapped.data(), swapped.size()));
  std::vector<unsigned char> longer = b;
  longer.push_back(0);  // one more zero byte
  EXPECT_NE(sum, checksum64(longer.data(), longer.size()));
  std::vector<unsigned char> zeros(64, 0);
  EXPECT_NE(checksum64(zeros.data(), 32), checksum64(zeros.data(), 64));
}

TEST(ReplicaCheck, OneRankAlwaysAgreesWithItself) {
  testing_util::SoloCommunicator solo;
  EXPECT_NO_THROW(check_replicas(solo, std::vector<float>(1000, 0.5f), "in the test"));
}
