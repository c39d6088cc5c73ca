// The replica check: every rank holds the same parameters (DESIGN.md decision 7). A checksum of the
// flat parameter buffer is gathered from every rank and compared with rank 0's. The checksum reads
// 8-byte words in four independent lanes, several times faster than the byte-wise FNV-1a it
// replaced (docs/PERFORMANCE.md): a 1B-parameter model's check takes a fraction of a second.
// Collective: every rank calls check_replicas at the same point. Not thread-safe: the
// communicator's calls are ordered by the one thread that drives them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/base/communicator.h"

namespace lockstep {

// A 64-bit checksum of `bytes` bytes: equal bytes give equal sums; any change of a word, its
// place or the length changes it but for chance (not a cryptographic hash). Not collective.
uint64_t checksum64(const void* data, size_t bytes);

// Collective over `comm` (host buffers). Throws Error naming the ranks whose `params` differ from
// rank 0's; `when` goes into the message ("at step 300").
void check_replicas(Communicator& comm, const std::vector<float>& params, const std::string& when);

}  // namespace lockstep
