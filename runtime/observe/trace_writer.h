// Trace, the writer: starts the recorder (trace.h) on every rank at one moment and gathers every
// rank's spans into one Chrome trace-event file. Both calls are collective over the communicator
// the caller gives (any backend, host or device buffers) and run on the calling thread.
#pragma once

#include <string>

namespace lockstep {

class Communicator;

// Collective (a barrier on `comm`): clears any earlier events and starts recording as rank
// comm.rank(), so the ranks' tracks line up to within the barrier's skew.
void start_tracing(Communicator& comm);

// Collective: runs the flush hooks, stops recording and writes every rank's events to `path` as
// one JSON object ({"traceEvents": [...]}). Each rank writes <path>.rank<r>; after a barrier rank
// 0 concatenates them into `path` and removes the parts. Throws UsageError naming --trace when a
// file cannot be written (on the rank that failed; the caller's agree step makes the others
// follow). Works over any communicator: with one that takes device buffers only
// (Communicator::device_buffers) its two agreement words travel through device memory.
void write_trace(Communicator& comm, const std::string& path);

}  // namespace lockstep
