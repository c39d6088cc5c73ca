// The replica check: every rank holds the same parameters (DESIGN.md decision 7). A checksum of the
// flat parameter buffer is gathered from every rank and compared with rank 0's.
// Collective: every rank calls check_replicas at the same point. Not thread-safe: the
// communicator's calls are ordered by the one thread that drives them.
#pragma once

#include <string>
#include <vector>

#include "runtime/base/communicator.h"

namespace lockstep {

// Collective over `comm` (host buffers). Throws Error naming the ranks whose `params` differ from
// rank 0's; `when` goes into the message ("at step 300").
void check_replicas(Communicator& comm, const std::vector<float>& params, const std::string& when);

}  // namespace lockstep
