// The option table (runtime/train/config_table.h): every option reads back the text it shows as its
// default (so a --config file may repeat what --help prints), a row's rule refuses a bad value
// both from text and in a struct built in code, with a message naming the option, and a
// checkpoint records each option it recorded before this table, under the same key.
#include "runtime/train/config_table.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <set>
#include <stdexcept>
#include <string>

#include "runtime/base/error.h"
#include "runtime/train/train_config.h"
#include "test_util.h"

namespace lockstep {
namespace {

using testing_util::usage_message;

const OptionRow<TrainConfig>& row(const std::string& name) {
  for (const OptionRow<TrainConfig>& r : train_config_options())
    if (r.name == name) return r;
  throw std::runtime_error("no row " + name);
}

TEST(ConfigTable, EveryDefaultReadsBackAsItself) {
  const TrainConfig defaults;
  for (const OptionRow<TrainConfig>& r : train_config_options()) {
    if (r.required) continue;
    TrainConfig c;
    ASSERT_NO_THROW(r.set(c, r.get(defaults))) << "--" << r.name << " " << r.get(defaults);
    EXPECT_EQ(r.get(c), r.get(defaults)) << "--" << r.name;
  }
  EXPECT_NO_THROW(check_config_options(defaults));
}

TEST(ConfigTable, NamesAreUniqueAndLongOptions) {
  std::set<std::string> seen;
  for (const OptionRow<TrainConfig>& r : train_config_options()) {
    EXPECT_TRUE(seen.insert(r.name).second) << "--" << r.name << " twice";
    const std::string name = r.name;
    EXPECT_TRUE(!name.empty() && name.front() != '-' &&
                name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-") ==
                    std::string::npos)
        << "'" << name << "' is not a long option name without dashes";
    EXPECT_NE(std::string(r.help), "") << "--" << r.name << " has no help text";
  }
}

TEST(ConfigTable, RulesRefuseFromTextAndFromCode) {
  TrainConfig c;
  EXPECT_NE(usage_message([&] { row("lr").set(c, "-0.1"); }).find("--lr"), std::string::npos);
  EXPECT_NE(usage_message([&] { row("lr").set(c, "abc"); }).find("--lr must be a number"),
            std::string::npos);
  EXPECT_NE(usage_message([&] { row("epochs").set(c, "1.5"); }).find("--epochs"),
            std::string::npos);
  EXPECT_NE(usage_message([&] { row("seed").set(c, "-1"); }).find("--seed"), std::string::npos);
  EXPECT_NE(usage_message([&] { row("grad-accum").set(c, "99999999999"); }).find("--grad-accum"),
            std::string::npos);
  EXPECT_EQ(c.lr, TrainConfig{}.lr) << "a refused value must leave the member as it was";

  TrainConfig coded;
  coded.prefetch = 0;
  EXPECT_NE(usage_message([&] { check_config_options(coded); }).find("--prefetch"),
            std::string::npos);
  coded = TrainConfig{};
  coded.model = "resnet";
  EXPECT_NE(usage_message([&] { validate(coded, 1); }).find("--model"), std::string::npos);
}

TEST(ConfigTable, RecordKeepsTheKeysCheckpointsHaveAlwaysHad) {
  TrainConfig c;
  c.train.path = "d.h5";
  c.drop_remainder = true;
  const std::string record = config_record(c);
  std::string framed = "\n";
  framed += record;
  for (const char* line : {"data=d.h5",
                           "group=train",
                           "test_group=test",
                           "model=cnn",
                           "loss=auto",
                           "optimizer=adam",
                           "momentum=0.9",
                           "nesterov=0",
                           "beta1=0.9",
                           "beta2=0.999",
                           "eps=1e-08",
                           "weight_decay=0",
                           "lr=0.001",
                           "lr_schedule=constant",
                           "warmup_steps=0",
                           "min_lr=0",
                           "lr_scaling=none",
                           "base_batch=256",
                           "global_batch=128",
                           "epochs=5",
                           "steps=0",
                           "grad_accum=1",
                           "seed=0",
                           "shuffle=1",
                           "drop_remainder=1",
                           "clip_norm=0",
                           "zero=0",
                           "eval_steps=0"}) {
    std::string needle = "\n";
    needle += line;
    needle += '\n';
    EXPECT_NE(framed.find(needle), std::string::npos) << line << " missing from:\n" << record;
  }
  // 27 keys, and eval_steps since 2026-11-30 (--eval-only takes it from the checkpoint).
  EXPECT_EQ(std::count(record.begin(), record.end(), '\n'), 28) << record;
}

}  // namespace
}  // namespace lockstep
