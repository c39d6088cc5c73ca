// Helpers shared by tests: temporary folders, the running world, UsageError messages.
#pragma once

#include <functional>
#include <string>

#include "runtime/process/bootstrap.h"

namespace lockstep::testing_util {

// A fresh folder under $TMPDIR (or /tmp) that the same test on every rank agrees on (rank 0 makes
// it and broadcasts the name). Collective. Removed with what it holds when the process that made
// it exits (LOCKSTEP_KEEP_TEST_DIRS=1 keeps it).
std::string shared_temp_dir(const std::string& tag);

// The same, for a single-process test.
std::string local_temp_dir(const std::string& tag);

// The message of the UsageError that f throws; empty when it throws none (other exceptions pass).
std::string usage_message(const std::function<void()>& f);

}  // namespace lockstep::testing_util
