// Files a run writes when it ends or as it goes (--metrics, --trace, ...), checked before any
// training: a folder that does not exist or cannot be written would otherwise be found only when
// the file is opened, possibly after hours of training. Nothing is created by the check.
// Thread-safe; no collective calls (train_main has rank 0 check and agrees on the verdict,
// agree.h).
#pragma once

#include <string>

namespace lockstep {

// Empty when `path` can be written (its folder exists and is writable, and it is not a folder
// itself); otherwise a message naming `option` and the path. An empty path is not checked.
std::string output_path_problem(const std::string& option, const std::string& path);

}  // namespace lockstep
