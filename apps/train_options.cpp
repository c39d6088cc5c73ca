#include "apps/train_options.h"

#include <algorithm>
#include <boost/program_options.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

#include "apps/option_hint.h"
#include "runtime/base/error.h"
#include "runtime/data/dataset.h"
#include "runtime/train/checkpoint.h"
#include "runtime/train/config_table.h"

namespace lockstep {

namespace po = boost::program_options;

namespace {

using Row = OptionRow<TrainOptions>;
using G = OptionGroup;

// One of the program's own options: `set` parses and checks the text.
Row own(const char* name, char short_name, G group, const char* help,
        std::function<std::string(const TrainOptions&)> get,
        std::function<void(TrainOptions&, const std::string&)> set) {
  Row r{name};
  r.short_name = short_name;
  r.group = group;
  r.help = help;
  r.get = std::move(get);
  r.set = std::move(set);
  return r;
}

Row own_switch(const char* name, char short_name, G group, const char* help,
               bool TrainOptions::*m) {
  Row r = own(
      name, short_name, group, help,
      [m](const TrainOptions& o) { return std::string(o.*m ? "1" : "0"); },
      [m](TrainOptions& o, const std::string& v) { o.*m = v == "1" || v == "true"; });
  r.is_switch = true;
  return r;
}

Row own_text(const char* name, G group, const char* help, std::string TrainOptions::*m) {
  return own(
      name, 0, group, help, [m](const TrainOptions& o) { return o.*m; },
      [m](TrainOptions& o, const std::string& v) { o.*m = v; });
}

// A word from `words` ("auto|bar|lines|none").
Row own_choice(const char* name, G group, const char* help, std::string TrainOptions::*m,
               std::vector<std::string> words) {
  return own(
      name, 0, group, help, [m](const TrainOptions& o) { return o.*m; },
      [name, m, words](TrainOptions& o, const std::string& v) {
        if (std::find(words.begin(), words.end(), v) == words.end()) {
          std::string list;
          for (size_t i = 0; i < words.size(); ++i)
            list += (i == 0 ? "" : i + 1 == words.size() ? " or " : ", ") + words[i];
          throw UsageError(std::string("--") + name + " must be " + list + ", not '" + v + "'");
        }
        o.*m = v;
      });
}

double number_in(const char* name, const std::string& v, double lo, double hi, bool lo_open,
                 const char* words) {
  char* end = nullptr;
  const double d = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !((lo_open ? d > lo : d >= lo) && d <= hi))
    throw UsageError(std::string("--") + name + " must be " + words + ", not " + v);
  return d;
}

// Puts `row` after the row named `after`: where --help lists it within its group.
void place_after(std::vector<Row>& t, const char* after, Row row) {
  auto it = std::find_if(t.begin(), t.end(),
                         [after](const Row& r) { return r.name == std::string(after); });
  t.insert(it == t.end() ? it : it + 1, std::move(row));
}

// TrainConfig's rows (config_table.h) over o.config, with the program's own among them; --help
// lists them by group, in this order within a group.
std::vector<Row> build_table() {
  std::vector<Row> t;
  t.push_back(own_switch("help", 'h', G::general, "print this list of options and exit",
                         &TrainOptions::help));
  t.push_back(own_switch("version", 0, G::general,
                         "print the version and the build's parts (CUDA, NCCL, oneDNN, BLAS); exit",
                         &TrainOptions::version));
  t.push_back(own(
      "config", 0, G::general,
      "INI file of option=value lines (long names, no dashes); command-line values win",
      [](const TrainOptions&) { return std::string(); }, [](TrainOptions&, const std::string&) {}));
  for (const OptionRow<TrainConfig>& c : train_config_options()) {
    Row r{c.name};
    r.short_name = c.short_name;
    r.group = c.group;
    r.help = c.help;
    r.help_more = c.help_more;
    r.is_switch = c.is_switch;
    r.required = c.required;
    r.record = c.record;
    r.get = [get = c.get](const TrainOptions& o) { return get(o.config); };
    r.set = [set = c.set](TrainOptions& o, const std::string& v) { set(o.config, v); };
    t.push_back(r);
  }
  place_after(t, "metrics",
              own_text("trace", G::output,
                       "write a Chrome trace-event JSON (chrome://tracing, Perfetto) of every rank "
                       "to this file",
                       &TrainOptions::trace));
  place_after(t, "straggler-every",
              own_choice("progress", G::output,
                         "auto (a bar on a terminal, else lines) | bar | lines | none",
                         &TrainOptions::progress, {"auto", "bar", "lines", "none"}));
  place_after(t, "progress",
              own_switch("verbose", 'v', G::output,
                         "log details on stderr: the launcher, MPI and GPU slot line at start-up, "
                         "debug messages (as LOCKSTEP_LOG_LEVEL=debug)",
                         &TrainOptions::verbose));
  place_after(t, "verbose",
              own_choice("device", G::runtime, "cpu | cuda | auto", &TrainOptions::device,
                         {"cpu", "cuda", "auto"}));
  place_after(t, "device",
              own_choice("comm", G::runtime, "auto (nccl on cuda, mpi on cpu) | mpi | nccl",
                         &TrainOptions::comm, {"auto", "mpi", "nccl"}));
  place_after(t, "bucket-mb",
              own(
                  "timeout", 0, G::runtime, "seconds a collective may take before the job fails",
                  [](const TrainOptions& o) {
                    std::ostringstream os;
                    os << o.timeout_seconds;
                    return os.str();
                  },
                  [](TrainOptions& o, const std::string& v) {
                    o.timeout_seconds = number_in("timeout", v, 0, 86400, true,
                                                  "a number of seconds in (0, 86400]");
                  }));
  place_after(t, "timeout",
              own(
                  "startup-timeout", 0, G::runtime,
                  "seconds one-off work may take across ranks: start-up, NCCL's connections, "
                  "--resume, the first 3 steps and the first evaluation (at least --timeout)",
                  [](const TrainOptions& o) {
                    std::ostringstream os;
                    os << o.startup_timeout_seconds;
                    return os.str();
                  },
                  [](TrainOptions& o, const std::string& v) {
                    o.startup_timeout_seconds = number_in("startup-timeout", v, 0, 86400, true,
                                                          "a number of seconds in (0, 86400]");
                  }));
  place_after(t, "check-every",
              own(
                  "threads", 0, G::runtime, "BLAS threads per rank (0: cores / ranks on this host)",
                  [](const TrainOptions& o) { return std::to_string(o.threads); },
                  [](TrainOptions& o, const std::string& v) {
                    const double n =
                        number_in("threads", v, 0, 1024, false, "between 0 (automatic) and 1024");
                    if (n != std::floor(n))
                      throw UsageError("--threads must be a whole number, not " + v);
                    o.threads = static_cast<int>(n);
                  }));
  place_after(t, "keep-checkpoints",
              own_text("resume", G::faults,
                       "continue from a checkpoint file, or the newest in a folder (any world "
                       "size)",
                       &TrainOptions::resume));
  place_after(t, "resume",
              own_switch("eval-only", 0, G::faults,
                         "evaluate the --resume checkpoint on --test-group and exit: the figures "
                         "its run printed, at any world size; nothing is trained or written",
                         &TrainOptions::eval_only));
  place_after(t, "eval-only",
              own_switch("overwrite-checkpoints", 0, G::faults,
                         "a fresh run deletes the checkpoints already in --checkpoint-dir (without "
                         "it, and without --resume, it refuses them)",
                         &TrainOptions::overwrite_checkpoints));
  return t;
}

const std::vector<Row>& table() {
  static const std::vector<Row> rows = build_table();
  return rows;
}

// A default as --help shows it: a number's exponent without leading zeros (1e-8, not 1e-08),
// an empty text as "", text with control characters quoted and escaped ("\n").
std::string shown_default(std::string d) {
  if (d.empty()) return "\"\"";
  // Text with a line break or another control character (--sample-prompt's newline) is shown
  // quoted and escaped, as one would type it, rather than breaking the --help column.
  if (std::any_of(d.begin(), d.end(),
                  [](char c) { return static_cast<unsigned char>(c) < 0x20; })) {
    std::string q = "\"";
    for (const char c : d) {
      if (c == '\n') {
        q += "\\n";
      } else if (c == '\t') {
        q += "\\t";
      } else if (static_cast<unsigned char>(c) < 0x20) {
        char hex[8];
        std::snprintf(hex, sizeof hex, "\\x%02x", static_cast<unsigned>(c));
        q += hex;
      } else {
        q += c;
      }
    }
    return q + "\"";
  }
  char* end = nullptr;
  std::strtod(d.c_str(), &end);
  const size_t e = d.find_first_of("eE");
  if (*end == '\0' && e != std::string::npos) {
    const size_t digits = d.find_first_not_of("+-", e + 1);
    while (digits != std::string::npos && d.size() > digits + 1 && d[digits] == '0')
      d.erase(digits, 1);
  }
  return d;
}

// One row as a Boost option: every value is text, parsed by its row, and shows the default of a
// default-constructed TrainOptions (an empty one as "").
void add_row(po::options_description& section, const Row& r, const TrainOptions& defaults) {
  std::string spelled = r.name;
  if (r.short_name != 0) spelled += std::string(",") + r.short_name;
  // Boost copies the text, so a computed one need not outlive this call.
  const std::string help = std::string(r.help) + (r.help_more ? r.help_more() : "");
  if (r.is_switch && r.name == std::string("help")) {
    // clang-format off
    section.add_options()(spelled.c_str(), help.c_str());
    // clang-format on
  } else if (r.is_switch) {
    // clang-format off
    section.add_options()(spelled.c_str(), po::bool_switch(), help.c_str());
    // clang-format on
  } else if (r.required) {
    // clang-format off
    section.add_options()(spelled.c_str(), po::value<std::string>(), help.c_str());
    // clang-format on
  } else {
    const std::string d = r.get(defaults);
    // clang-format off
    section.add_options()(spelled.c_str(),
                          po::value<std::string>()->default_value(d, shown_default(d)),
                          help.c_str());
    // clang-format on
  }
}

// Sets o from the rows given in vm; a default stays the struct's own value.
void set_given(const po::variables_map& vm, const Row& r, TrainOptions& o) {
  if (!vm.count(r.name) || vm[r.name].defaulted()) return;
  o.given.emplace_back(r.name);
  if (r.is_switch) {
    if (vm[r.name].as<bool>()) r.set(o, "1");
  } else {
    r.set(o, vm[r.name].as<std::string>());
  }
}

const Row& row_named(const std::string& name) {
  for (const Row& r : table())
    if (r.name == name) return r;
  throw std::logic_error("lockstep-train has no option --" + name);
}

// --help's sections from the table.
po::options_description describe(const std::string& program) {
  const TrainOptions defaults;
  po::options_description all(program + " options");
  for (int g = 0; g <= static_cast<int>(G::faults); ++g) {
    po::options_description section(option_group_title(static_cast<G>(g)));
    for (const Row& r : table())
      if (r.group == static_cast<G>(g)) add_row(section, r, defaults);
    all.add(section);
  }
  return all;
}

}  // namespace

void add_train_options(po::options_description& desc, const std::vector<std::string>& names) {
  const TrainOptions defaults;
  for (const std::string& name : names) add_row(desc, row_named(name), defaults);
}

void set_train_options(const po::variables_map& vm, const std::vector<std::string>& names,
                       TrainOptions& o) {
  for (const std::string& name : names) set_given(vm, row_named(name), o);
}

namespace {
// Row `name` of `o` set from the record's value, where it has one.
void adopt_into(TrainOptions& o, const std::map<std::string, std::string>& saved,
                const char* name) {
  const Row& r = row_named(name);
  if (r.record == nullptr) return;
  if (auto it = saved.find(r.record); it != saved.end()) r.set(o, it->second);
}

bool was_given(const TrainOptions& o, const std::string& name) {
  return std::find(o.given.begin(), o.given.end(), name) != o.given.end();
}
}  // namespace

void adopt_checkpoint_options(TrainOptions& o, const std::string& record, int world_size) {
  const std::map<std::string, std::string> saved = config_record_values(record);
  auto given = [&](const char* name) { return was_given(o, name); };
  for (const char* name : {"model", "loss", "optimizer", "seed", "eval-steps"})
    if (!given(name)) adopt_into(o, saved, name);
  // The evaluation's batch: the run's rows per step (its micro-batch over all ranks), in one
  // micro-batch, as a multiple of the ranks.
  TrainConfig& c = o.config;
  if (!given("grad-accum")) c.grad_accum = 1;
  if (given("global-batch")) return;
  TrainOptions run;
  run.config = c;
  adopt_into(run, saved, "global-batch");
  adopt_into(run, saved, "grad-accum");
  const int64_t rows = run.config.global_batch / std::max(run.config.grad_accum, 1);
  const int64_t p = std::max(world_size, 1) * static_cast<int64_t>(c.grad_accum);
  c.global_batch = std::max(p, rows / p * p);
}

void evaluate_test_split_only(TrainOptions& o, int world_size) {
  TrainConfig& c = o.config;
  c.train.group = c.test_group;
  if (was_given(o, "global-batch")) return;
  const int64_t rows = inspect_dataset(c.train).rows;
  const int64_t p = std::max(world_size, 1) * static_cast<int64_t>(std::max(c.grad_accum, 1));
  if (rows < c.global_batch) c.global_batch = std::max(p, rows / p * p);
}

std::string adopt_resumed_options(TrainOptions& o, const std::string& record) {
  const std::map<std::string, std::string> saved = config_record_values(record);
  auto given = [&](const std::string& name) { return was_given(o, name); };
  const bool length_given = given("steps") || given("epochs");
  std::string taken;
  for (const Row& r : table()) {
    if (r.record == nullptr || given(r.name)) continue;
    const std::string key = r.record;
    if (key == "data" || key == "group" || key == "test_group" || key == "zero") continue;
    if ((key == "steps" || key == "epochs") && length_given) continue;
    const auto it = saved.find(key);
    if (it == saved.end()) continue;
    // The remainder is recorded as a flag, the option takes a word.
    const std::string value =
        key == "drop_remainder" ? (it->second == "1" ? "drop" : "mask") : it->second;
    if (r.get && r.get(o) == value) continue;
    r.set(o, value);
    taken += (taken.empty() ? "--" : ", --") + std::string(r.name) + " " + value;
  }
  return taken;
}

std::string program_name(const char* argv0) {
  if (argv0 == nullptr || *argv0 == '\0') return "lockstep-train";
  return std::filesystem::path(argv0).filename().string();
}

namespace {
// Whether --resume R continues the run whose checkpoints lie in --checkpoint-dir D: R is D, or a
// file in D.
bool resumes_from(const std::string& resume, const std::string& dir) {
  if (resume.empty() || dir.empty()) return false;
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::equivalent(resume, dir, ec)) return true;
  const fs::path parent =
      fs::path(resume).has_parent_path() ? fs::path(resume).parent_path() : fs::path(".");
  return fs::is_regular_file(resume, ec) && fs::equivalent(parent, dir, ec);
}
}  // namespace

TrainOptions parse_train_options(int argc, char** argv) {
  const std::string program = program_name(argc > 0 ? argv[0] : nullptr);
  po::options_description all = describe(program);
  TrainOptions o;
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, all), vm);
    if (vm.count("help")) {
      std::ostringstream os;
      os << "usage: [mpiexec -n P] " << program << " --data FILE|NAME [options]\n\n" << all;
      o.help = true;
      o.help_text = os.str();
      return o;
    }
    if (vm.count("version") && vm["version"].as<bool>()) {
      o.version = true;
      return o;
    }
    if (vm.count("config") && !vm["config"].as<std::string>().empty()) {
      const std::string path = vm["config"].as<std::string>();
      std::error_code ec;
      if (std::filesystem::is_directory(path, ec))
        throw UsageError("--config " + path + ": is a folder, expected an INI file");
      std::ifstream in(path);
      if (!in) throw UsageError("--config: cannot read '" + path + "'");
      try {
        const po::parsed_options parsed = po::parse_config_file(in, all);
        // What only the command line can ask for: a file that asked for help or the version
        // would print instead of training, and one naming another file would be ignored.
        for (const po::option& line : parsed.options)
          if (line.string_key == "help" || line.string_key == "version" ||
              line.string_key == "config")
            throw UsageError("--config " + path + ": '" + line.string_key +
                             "' is a command-line option only, not a line of a config file");
        po::store(parsed, vm);
      } catch (const po::error& e) {
        throw UsageError("--config " + path + ": " + apps::option_error_text(e, all));
      }
    }
    po::notify(vm);
  } catch (const po::error& e) {
    throw UsageError(apps::option_error_text(e, all) + " (see " + program + " --help)");
  }

  // Only what was given is set: a default stays the struct's own value.
  for (const Row& r : table()) set_given(vm, r, o);
  TrainConfig& c = o.config;
  if (c.train.path.empty()) throw UsageError("--data is required: an HDF5 file or a dataset name");
  o.data = c.train.path;
  c.train.path = resolve_data_path(o.data);
  if (o.eval_only && o.resume.empty())
    throw UsageError(
        "--eval-only needs --resume: the checkpoint (file, or folder's newest) to "
        "evaluate");
  if (o.eval_only) {  // writes nothing: the outputs a training command line names are not used
    for (const char* name : {"checkpoint-dir", "metrics", "trace"})
      if (was_given(o, name))
        o.unused_outputs += (o.unused_outputs.empty() ? "--" : ", --") + std::string(name);
    c.guard.checkpoint_dir.clear();
    c.guard.checkpoint_every = 0;
    c.metrics_path.clear();
    o.trace.clear();
  }
  // A resumed run adds to its --metrics lines (a preempted job's file keeps its first part).
  c.append_metrics = !o.resume.empty();
  // A resumed run continues beside the checkpoints of the run it resumes; a --checkpoint-dir
  // elsewhere holds another run's, which the overwrite rule protects as for a fresh run.
  c.guard.existing = resumes_from(o.resume, c.guard.checkpoint_dir) ? ExistingCheckpoints::keep
                     : o.overwrite_checkpoints                      ? ExistingCheckpoints::replace
                                                                    : ExistingCheckpoints::refuse;
  return o;
}

std::string resolve_data_path(const std::string& data) {
  std::error_code ec;
  if (std::filesystem::exists(data, ec)) return data;
  bool looks_like_name = data.find('/') == std::string::npos && data.find('.') == std::string::npos;
  if (!looks_like_name) throw UsageError("--data: no such file '" + data + "'");
  std::vector<std::string> tried;
  if (const char* dir = std::getenv("LOCKSTEP_DATA_DIR"); dir && *dir)
    tried.push_back(std::string(dir) + "/" + data + ".h5");
  tried.push_back("data/" + data + ".h5");
  for (const std::string& p : tried)
    if (std::filesystem::exists(p, ec)) return p;
  std::string where;
  for (const std::string& p : tried) where += (where.empty() ? "" : " or ") + p;
  // Only lockstep-data's generators and converters make a file from a name alone.
  const bool made_by_lockstep_data =
      data == "fashion-mnist" || data == "regression" || data == "synthetic";
  throw UsageError("--data " + data + ": neither a file nor found as " + where +
                   (made_by_lockstep_data
                        ? " (create it with: lockstep-data " + data + " --out " + tried.back() + ")"
                        : " (lockstep-data --help lists the files it can create)"));
}

}  // namespace lockstep
