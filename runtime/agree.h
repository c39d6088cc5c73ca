// Agreement over a Communicator: the verdicts of all its ranks on something each checked alone (a
// file, a configuration, a checkpoint) become one verdict that every rank acts on, so all of them
// leave together and no rank is left waiting in a collective. The Communicator-scoped twin of
// agree_or_throw in bootstrap.h, which agrees over MPI_COMM_WORLD: code that runs over a
// communicator it was given (the trainer, its StepGuard, resuming) agrees over that one, so only
// its ranks take part, whether it is the whole job, a world of one in a test or a part of the job.
//
// The values exchanged are host memory. A communicator that takes device buffers only (NCCL, or MPI
// staging device buffers) cannot carry them: require_host_buffers() refuses it up front.
// Collective where it says so; called from the thread that issues the communicator's collectives.
#pragma once

#include <string>

#include "runtime/communicator.h"

namespace lockstep {

// Collective over `comm`. If any rank has ok == false, every rank of `comm` throws UsageError
// carrying the message of the lowest failing rank; otherwise returns on every rank.
void agree_or_throw(Communicator& comm, bool ok, const std::string& message);

// Throws UsageError when `comm` cannot take host buffers (Communicator::device_buffers). `who`
// names the user of the values ("the trainer"). Not collective: every rank of a communicator has
// the same backend, so all reach the same verdict without talking.
void require_host_buffers(const Communicator& comm, const std::string& who);

}  // namespace lockstep
