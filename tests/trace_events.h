// Reads back the trace files that write_trace() writes, for tests: one event object per line
// (runtime/observe/trace.cpp writes them so), each with ph, name, pid, tid, and ts/dur for spans
// ("X") or args.name for track names ("M"). Not a general JSON reader.
#pragma once

#include <fstream>
#include <regex>
#include <string>
#include <vector>

namespace lockstep::testing_util {

struct TraceEvent {
  std::string ph, name, cat;  // cat: spans' category
  int pid = -1, tid = -1;
  double ts = 0, dur = 0;  // microseconds
  std::string args;        // the args object's members, unparsed
};

// The string value of `key` in a flat JSON object text, or "" when absent.
inline std::string json_string(const std::string& text, const std::string& key) {
  std::smatch m;
  if (std::regex_search(text, m, std::regex("\"" + key + "\": \"((?:[^\"\\\\]|\\\\.)*)\"")))
    return m[1];
  return "";
}

// The numeric value of `key`, or `missing` when absent.
inline double json_number(const std::string& text, const std::string& key, double missing = -1) {
  std::smatch m;
  if (std::regex_search(text, m, std::regex("\"" + key + "\": (-?[0-9.eE+-]+)")))
    return std::stod(m[1]);
  return missing;
}

inline std::vector<TraceEvent> read_trace_events(const std::string& path) {
  std::ifstream in(path);
  std::vector<TraceEvent> events;
  std::string line;
  while (std::getline(in, line)) {
    const size_t args_at = line.find("\"args\": {");
    if (line.rfind("{\"ph\": ", 0) != 0 || args_at == std::string::npos) continue;
    const std::string head = line.substr(0, args_at);
    TraceEvent e;
    e.ph = json_string(head, "ph");
    e.name = json_string(head, "name");
    e.cat = json_string(head, "cat");
    e.pid = static_cast<int>(json_number(head, "pid"));
    e.tid = static_cast<int>(json_number(head, "tid"));
    e.ts = json_number(head, "ts", 0);
    e.dur = json_number(head, "dur", 0);
    const size_t close = line.rfind("}}");
    e.args = line.substr(args_at + 9,
                         close == std::string::npos ? std::string::npos : close - (args_at + 9));
    events.push_back(e);
  }
  return events;
}

// The track (tid) whose thread_name is `name` in process `pid`, or -1.
inline int trace_track_named(const std::vector<TraceEvent>& events, int pid,
                             const std::string& name) {
  for (const TraceEvent& e : events)
    if (e.ph == "M" && e.name == "thread_name" && e.pid == pid &&
        json_string(e.args, "name") == name)
      return e.tid;
  return -1;
}

}  // namespace lockstep::testing_util
