// The data the benchmarks feed collectives and the values they must get back. Inputs are small
// integers that depend on rank and index (a wrong root, block order or op shows) and that every
// element type holds exactly; their sums stay exact too (below 256, so even bfloat16 and uint8
// hold them) for up to 255 ranks. Checks are exact for integers and within a relative tolerance
// for floats (a mean divides). Pure functions; any thread.
#pragma once

#include <cstddef>

#include "runtime/base/communicator.h"
#include "runtime/base/dtype.h"

namespace lockstep::bench {

// What rank `rank` of `ranks` puts at index i.
double input_value(int rank, size_t i, int ranks);

// What element i holds after reducing every rank's input_value(r, i) with `op`, as `type` computes
// it: integer means round toward zero, uint8 sums wrap.
double reduced_value(ReduceOp op, DType type, size_t i, int ranks);

// Element i of a buffer of `type`, written or read as a double.
void store_value(DType type, void* buf, size_t i, double value);
double load_value(DType type, const void* buf, size_t i);

// Whether `got` is `want` as far as `type` can tell.
bool values_match(DType type, double got, double want);

}  // namespace lockstep::bench
