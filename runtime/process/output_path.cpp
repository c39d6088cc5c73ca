#include "runtime/process/output_path.h"

#include <unistd.h>

#include <filesystem>

namespace lockstep {

std::string output_path_problem(const std::string& option, const std::string& path,
                                const NamedPaths& others) {
  if (path.empty()) return "";
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p(path);
  const std::string where = option + " " + path + ": ";
  for (const auto& [other_option, other] : others) {
    if (other.empty()) continue;
    std::error_code e1, e2, e3;
    const fs::path a = fs::weakly_canonical(p, e1), b = fs::weakly_canonical(other, e2);
    if (fs::equivalent(p, other, e3) || (!e1 && !e2 && !a.empty() && a == b))
      return where + "the same file as " + other_option + " " + other;
  }
  if (fs::is_directory(p, ec)) return where + "is a folder, expected a file name";
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  if (!fs::exists(dir, ec)) return where + "the folder " + dir.string() + " does not exist";
  if (!fs::is_directory(dir, ec)) return where + dir.string() + " is not a folder";
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    return where + "the folder " + dir.string() + " is not writable";
  if (fs::exists(p, ec) && ::access(path.c_str(), W_OK) != 0)
    return where + "the file exists and is not writable";
  return "";
}

}  // namespace lockstep
