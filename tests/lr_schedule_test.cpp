// Learning-rate schedules: warm-up ramps to the peak, cosine and linear decay reach min_lr at the
// last step, the linear scaling rule scales by global batch over base batch, and bad names are
// refused naming the option.
#include "runtime/model/lr_schedule.h"

#include <gtest/gtest.h>

#include <cmath>

#include "runtime/base/error.h"

using namespace lockstep;

TEST(LrSchedule, ConstantWithWarmup) {
  LrSchedule s{LrScheduleKind::constant, 0.1, 4, 100, 0.0};
  EXPECT_DOUBLE_EQ(0.025, lr_at(s, 0));
  EXPECT_DOUBLE_EQ(0.05, lr_at(s, 1));
  EXPECT_DOUBLE_EQ(0.1, lr_at(s, 3));
  EXPECT_DOUBLE_EQ(0.1, lr_at(s, 4));
  EXPECT_DOUBLE_EQ(0.1, lr_at(s, 99));
  s.warmup_steps = 0;
  EXPECT_DOUBLE_EQ(0.1, lr_at(s, 0));
}

TEST(LrSchedule, CosineDecaysFromPeakToMinOverTheRun) {
  LrSchedule s{LrScheduleKind::cosine, 1.0, 10, 110, 0.1};
  EXPECT_DOUBLE_EQ(0.1, lr_at(s, 0));  // warm-up: 1/10 of the peak
  EXPECT_DOUBLE_EQ(1.0, lr_at(s, 10));
  EXPECT_NEAR(0.55, lr_at(s, 60), 1e-12);  // half way: the mean of peak and min
  EXPECT_DOUBLE_EQ(0.1, lr_at(s, 110));
  EXPECT_DOUBLE_EQ(0.1, lr_at(s, 500));  // past the end: stays at min
  double prev = lr_at(s, 10);
  for (int64_t k = 11; k <= 110; ++k) {
    EXPECT_LE(lr_at(s, k), prev);
    prev = lr_at(s, k);
  }
}

TEST(LrSchedule, LinearDecay) {
  LrSchedule s{LrScheduleKind::linear, 2.0, 0, 100, 0.0};
  EXPECT_DOUBLE_EQ(2.0, lr_at(s, 0));
  EXPECT_DOUBLE_EQ(1.0, lr_at(s, 50));
  EXPECT_DOUBLE_EQ(0.0, lr_at(s, 100));
}

TEST(LrSchedule, LinearScalingRule) {
  EXPECT_DOUBLE_EQ(0.4, scaled_lr(0.1, LrScaling::linear, 1024, 256));
  EXPECT_DOUBLE_EQ(0.05, scaled_lr(0.1, LrScaling::linear, 128, 256));
  EXPECT_DOUBLE_EQ(0.1, scaled_lr(0.1, LrScaling::none, 1024, 256));
}

TEST(LrSchedule, NamesParseAndBadNamesNameTheOption) {
  EXPECT_EQ(LrScheduleKind::cosine, parse_lr_schedule("cosine"));
  EXPECT_EQ(LrScheduleKind::linear, parse_lr_schedule("linear"));
  EXPECT_EQ(LrScheduleKind::constant, parse_lr_schedule("constant"));
  EXPECT_EQ(LrScaling::linear, parse_lr_scaling("linear"));
  try {
    parse_lr_schedule("exponential");
    ADD_FAILURE() << "accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string::npos, std::string(e.what()).find("--lr-schedule")) << e.what();
  }
  EXPECT_THROW(parse_lr_scaling("sqrt"), UsageError);
}
