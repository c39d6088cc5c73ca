#include "runtime/train/test_hooks.h"

#include <cstdlib>
#include <string>

namespace lockstep {
namespace {

// A hook's value: its number before the colon (part 0) or after it (part 1); -1 where unset or
// malformed.
int64_t env_number(const char* name, int part) {
  const char* v = std::getenv(name);
  if (v == nullptr) return -1;
  std::string text(v);
  const size_t colon = text.find(':');
  if (part == 1) {
    if (colon == std::string::npos) return -1;
    text = text.substr(colon + 1);
  } else {
    text = text.substr(0, colon);
  }
  char* end = nullptr;
  const long long n = std::strtoll(text.c_str(), &end, 10);
  return end != text.c_str() && *end == '\0' ? n : -1;
}

}  // namespace

TrainTestHooks TrainTestHooks::from_environment() {
  TrainTestHooks h;
  h.capture_fail_rank = static_cast<int>(env_number("LOCKSTEP_TEST_CAPTURE_FAIL_RANK", 0));
  h.inf_loss_rank = static_cast<int>(env_number("LOCKSTEP_TEST_LOSS_INF", 0));
  h.inf_loss_step = env_number("LOCKSTEP_TEST_LOSS_INF", 1);
  h.delay_rank = static_cast<int>(env_number("LOCKSTEP_TEST_DELAY_FIRST_BATCH", 0));
  h.delay_ms = env_number("LOCKSTEP_TEST_DELAY_FIRST_BATCH", 1);
  h.launch_fault_step = env_number("LOCKSTEP_TEST_LAUNCH_FAULT", 0);
  return h;
}

}  // namespace lockstep
