#include "runtime/base/deadline_call.h"

#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

namespace lockstep {

namespace {
// Shared by the caller and the helper thread, so that it outlives whichever leaves first.
struct Finish {
  std::mutex mutex;
  std::condition_variable changed;
  bool done = false;
};
}  // namespace

bool run_within(std::chrono::milliseconds limit, std::function<void()> fn) noexcept {
  try {
    auto finish = std::make_shared<Finish>();
    std::thread helper([finish, fn = std::move(fn)] {
      try {
        fn();
      } catch (...) {
      }
      std::lock_guard<std::mutex> lock(finish->mutex);
      finish->done = true;
      finish->changed.notify_all();
    });
    bool done = false;
    {
      std::unique_lock<std::mutex> lock(finish->mutex);
      done = finish->changed.wait_for(lock, limit, [&] { return finish->done; });
    }
    if (done) {
      helper.join();  // fn has returned: only the thread's exit is left
    } else {
      helper.detach();
    }
    return done;
  } catch (...) {
    return false;  // no thread (std::system_error) or no memory for its state
  }
}

}  // namespace lockstep
