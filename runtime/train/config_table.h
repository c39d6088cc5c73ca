// The table of a training run's options: one row per option of TrainConfig (trainer.h) holding its
// name, its --help group and text, how to read and write its member as text, the rule its value
// must meet, and its key in the options a checkpoint records. lockstep-train builds its command
// line, --help and INI file from these rows (plus its own rows for what only the program uses,
// apps/train_options.cpp); validate(TrainConfig) runs their rules; capture_checkpoint records them.
//
// Why the defaults stay on the structs and the rows refer to members: TrainConfig is the
// runtime's API, built directly by tests and lockstep-bench, so its defaults must hold without the
// program; a row reads its default from a default-constructed struct, so it is written once, as a
// member initialiser. Rules of the optimizer's and the guard's values stay in validate(
// OptimizerConfig) and validate(GuardOptions), which their classes run themselves; a rule that
// involves several options (the batch against the ranks, --epochs against --steps) stays in
// validate(TrainConfig). Every other rule is in its row, and nowhere else.
//
// The rows are built once, on first use; any thread may read them afterwards.
// No collective calls: every rank checks the same options alike.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace lockstep {

struct TrainConfig;

// The sections of lockstep-train --help, in their order.
enum class OptionGroup { general, data, model, optimizer, loop, output, runtime, faults };
const char* option_group_title(OptionGroup g);

// One option over a struct T. Setting from text parses and checks the text (UsageError naming
// --name); check() applies the rule to a value already in the struct (a struct built in code).
template <class T>
struct OptionRow {
  const char* name;     // the long option without dashes; also its INI key
  char short_name = 0;  // 0: none
  OptionGroup group = OptionGroup::general;
  const char* help = "";
  // Text --help appends to `help`, computed each time --help is built: --model's layer words come
  // from the layer registry, so a program's own layers are listed. Empty: nothing.
  std::function<std::string()> help_more = {};
  bool is_switch = false;  // takes no value: present means on
  bool required = false;   // no default: the program refuses a run without it
  std::function<std::string(const T&)> get = {};         // the value as an option's text
  std::function<void(T&, const std::string&)> set = {};  // from the command line or INI file
  std::function<void(const T&)> check = {};              // the row's rule; empty: none of its own
  const char* record = nullptr;  // key in a checkpoint's options; null: not recorded
  std::function<std::string(const T&)> record_value = {};  // empty: get
};

// TrainConfig's options, in --help order within each group.
const std::vector<OptionRow<TrainConfig>>& train_config_options();

// Every row's rule over `c`; the first broken one throws UsageError naming its option.
void check_config_options(const TrainConfig& c);

// The run's options as a checkpoint records them: one "key=value" line per recorded row, in table
// order, then shuffle=.
std::string config_record(const TrainConfig& c);

}  // namespace lockstep
