// Logging. By default only rank 0 prints; with all-ranks logging every rank prints and each line
// carries its "[rank r/P host]" prefix. Level and scope come from flags (set_log_level,
// set_log_all_ranks) or the environment (LOCKSTEP_LOG_LEVEL=error|warn|info|debug,
// LOCKSTEP_LOG_RANKS=all). Lines go to stderr, so stdout stays for results. Thread-safe per line.
//
//   LS_LOG(info) << "epoch " << e << " done";
// No collective calls: each rank decides alone whether it prints.
#pragma once

#include <sstream>
#include <string>

namespace lockstep {

enum class LogLevel { error = 0, warn = 1, info = 2, debug = 3 };

void init_logging(int rank);  // reads the environment; called by MpiSession
void set_log_level(LogLevel level);
void set_log_all_ranks(bool all);
LogLevel parse_log_level(const std::string& text);  // throws UsageError on an unknown name
bool log_enabled(LogLevel level);

class LogLine {
 public:
  explicit LogLine(LogLevel level) : level_(level) {}
  ~LogLine();
  template <class T>
  LogLine& operator<<(const T& v) {
    os_ << v;
    return *this;
  }

 private:
  LogLevel level_;
  std::ostringstream os_;
};

}  // namespace lockstep

#define LS_LOG(level)                                          \
  if (!::lockstep::log_enabled(::lockstep::LogLevel::level)) { \
  } else                                                       \
    ::lockstep::LogLine(::lockstep::LogLevel::level)
