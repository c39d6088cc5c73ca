// Option handling shared by the lockstep-bench subcommands: byte sizes in nccl-tests style ("8",
// "1K", "64M", "2G": powers of 1024, an optional trailing "B" or "iB"), the size series from -b to
// -e by a factor -f, element types and reduce ops by name, and the Boost.Program_options call that
// turns any parse error into a UsageError naming the subcommand. Every function throws UsageError
// on bad input with a message a user can act on. Pure functions; any thread.
#pragma once

#include <boost/program_options.hpp>
#include <cstddef>
#include <string>
#include <vector>

#include "runtime/base/communicator.h"
#include "runtime/base/dtype.h"

namespace lockstep::bench {

// "64M" -> 67108864. `flag` names the option in the error message.
size_t parse_bytes(const std::string& text, const std::string& flag);

// 67108864 -> "64 MiB", 1536 -> "1536 B": exact, in the largest unit that divides the size.
std::string format_bytes(size_t bytes);

// min, min*f, min*f^2, ... while <= max. Needs 1 <= min <= max and f >= 2.
std::vector<size_t> size_series(size_t min_bytes, size_t max_bytes, size_t factor);

// "float32" (or "f32", "float"), "float64", "bfloat16", "float16", "int32", "int64", "uint8".
DType parse_dtype(const std::string& text);
std::string dtype_choices();  // for help texts and errors

// "sum" | "mean" | "max" | "min".
ReduceOp parse_op(const std::string& text);

// Parses the words after the subcommand's name (argv[0] is that name) against `options`. Unknown
// options, stray words and malformed values become UsageError("lockstep-bench <command>: ...").
boost::program_options::variables_map parse_options(
    const std::string& command, int argc, char** argv,
    const boost::program_options::options_description& options);

// When --help was given, rank 0 prints `options` and this returns true (the caller then stops).
bool print_help_if_asked(const boost::program_options::variables_map& vm,
                         const boost::program_options::options_description& options, int rank);

}  // namespace lockstep::bench
