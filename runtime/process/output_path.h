// Files a run writes when it ends or as it goes (--metrics, --trace, ...), checked before any
// training: a folder that does not exist or cannot be written would otherwise be found only when
// the file is opened, possibly after hours of training. Nothing is created by the check.
// Thread-safe; no collective calls (train_main has rank 0 check and agrees on the verdict,
// agree.h).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace lockstep {

// Files a run reads or writes besides the one checked, as (option, path): "--data" and its file.
using NamedPaths = std::vector<std::pair<std::string, std::string>>;

// Empty when `path` can be written (its folder exists and is writable, and it is not a folder
// itself) and names none of `others` (the same file, or the same path before it exists: writing it
// would destroy a run's data or checkpoint, or two outputs would overwrite each other); otherwise a
// message naming `option` and the path. An empty path is not checked, nor are empty others.
std::string output_path_problem(const std::string& option, const std::string& path,
                                const NamedPaths& others = {});

}  // namespace lockstep
