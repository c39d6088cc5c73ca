// Thread lanes (not the vector lanes of lanes16.h): the rank's threads each running a whole pass
// of their own (a model's forward or backward pass, runtime/model/model.h) over their own rows of
// a batch, instead of sharing every operation of one pass. Each operation then runs on one thread
// over fewer rows: no barrier per operation, none of a threaded library's splitting of small
// products, at the price of each lane keeping gradients of its own that are added up afterwards.
//
// run_lanes(lanes, rounds, work, shared, serial): for round r = 0 .. rounds - 1, work(lane, r) for
// every lane (lane l on thread l mod the team's size; lane 0 on the calling thread), then, once
// every lane's round is done, shared(r, part, parts) on each of the team's threads (part 0 ..
// parts - 1: a job split into parts, each thread its own), then, once every part is done,
// serial(r) on the calling thread while the other threads go on with the next round's work.
// shared and serial may be null. An exception from any call stops every later call (the rounds'
// barriers are still met, so nothing hangs) and the first one is rethrown by run_lanes. In a
// build without OpenMP, or called inside a parallel region, everything runs on the calling thread
// in the same order. Not reentrant from inside its own calls. Thread-safe where the calls given
// are, for lanes that touch disjoint memory. No collective calls of its own (serial may make
// them, on the calling thread).
#pragma once

#include <functional>

namespace lockstep::kernels {

// The threads a lane may take: the rank's (--threads) outside a parallel region, else 1.
int lane_threads();

void run_lanes(int lanes, int rounds, const std::function<void(int lane, int round)>& work,
               const std::function<void(int round, int part, int parts)>& shared = nullptr,
               const std::function<void(int round)>& serial = nullptr);

}  // namespace lockstep::kernels
