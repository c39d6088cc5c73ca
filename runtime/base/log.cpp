#include "runtime/base/log.h"

#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "runtime/base/error.h"

namespace lockstep {
namespace {
LogLevel g_level = LogLevel::info;
bool g_all_ranks = false;
int g_rank = 0;
std::mutex g_mutex;
const char* kNames[] = {"error", "warn", "info", "debug"};
}  // namespace

LogLevel parse_log_level(const std::string& text) {
  for (int i = 0; i < 4; ++i)
    if (text == kNames[i]) return static_cast<LogLevel>(i);
  throw UsageError("unknown log level '" + text + "' (use error, warn, info or debug)");
}

void init_logging(int rank) {
  g_rank = rank;
  if (const char* lvl = std::getenv("LOCKSTEP_LOG_LEVEL"); lvl != nullptr && *lvl != '\0') {
    try {
      g_level = parse_log_level(lvl);
    } catch (const UsageError&) {
      std::fprintf(stderr, "warning: LOCKSTEP_LOG_LEVEL=%s is not a level; using info\n", lvl);
    }
  }
  if (const char* r = std::getenv("LOCKSTEP_LOG_RANKS"); r != nullptr)
    g_all_ranks = std::string(r) == "all";
}

void set_log_level(LogLevel level) { g_level = level; }
void set_log_all_ranks(bool all) { g_all_ranks = all; }

bool log_enabled(LogLevel level) {
  if (level > g_level) return false;
  // Errors are printed by whichever rank has them; the rest by rank 0 unless asked otherwise.
  return g_all_ranks || g_rank == 0 || level == LogLevel::error;
}

LogLine::~LogLine() {
  std::string text = os_.str();
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_all_ranks || level_ == LogLevel::error)
    std::fprintf(stderr, "%s %s\n", rank_prefix().c_str(), text.c_str());
  else
    std::fprintf(stderr, "%s\n", text.c_str());
  std::fflush(stderr);
}

}  // namespace lockstep
