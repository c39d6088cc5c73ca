// Agreement: the verdicts of all ranks of a Communicator on something each checked alone (options,
// a file, a device, a configuration, a checkpoint) become one verdict that every rank acts on, so
// all of them leave together and no rank is left waiting in a collective. This is the one place
// the protocol is written: the lowest rank with a problem broadcasts its message.
//
// Apps agree over the world's host communicator (MpiSession::world_comm(), from MPI start-up on);
// code that runs over a communicator it was given (the trainer, its StepGuard, resuming) agrees
// over that one, so only its ranks take part.
//
// The values exchanged are host memory. A communicator that takes device buffers only (NCCL, or MPI
// staging device buffers) cannot carry them: require_host_buffers() refuses it up front.
// Collective where it says so; called from the thread that issues the communicator's collectives.
#pragma once

#include <optional>
#include <string>

#include "runtime/base/communicator.h"

namespace lockstep {

struct FirstProblem {
  int rank = -1;        // the lowest rank that had a problem
  int ranks = 0;        // how many ranks had one
  std::string message;  // that rank's message
};

// Collective over `comm`: nullopt on every rank when every rank has ok == true; otherwise, on every
// rank, the lowest failing rank's message and how many ranks failed.
std::optional<FirstProblem> first_problem(Communicator& comm, bool ok, const std::string& message);

// Collective over `comm`. If any rank has ok == false, every rank of `comm` throws AgreedUsageError
// carrying the message of the lowest failing rank; otherwise returns on every rank.
void agree_or_throw(Communicator& comm, bool ok, const std::string& message);

// Throws UsageError when `comm` cannot take host buffers (Communicator::device_buffers). `who`
// names the user of the values ("the trainer"). Not collective: every rank of a communicator has
// the same backend, so all reach the same verdict without talking.
void require_host_buffers(const Communicator& comm, const std::string& who);

}  // namespace lockstep
