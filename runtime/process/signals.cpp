#include "runtime/process/signals.h"

#include <signal.h>

#include <atomic>
#include <csignal>

namespace lockstep {
namespace {

std::atomic<int> g_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "the signal flag must be lock-free");

constexpr int kStopSignals[] = {SIGTERM, SIGINT, SIGUSR1};

extern "C" void on_stop_signal(int sig) {
  int expected = 0;
  if (!g_signal.compare_exchange_strong(expected, sig) && expected == sig) {
    // The same signal again: the user insists. signal() and raise() are async-signal-safe.
    std::signal(sig, SIG_DFL);
    std::raise(sig);
  }
}

}  // namespace

void install_stop_handlers() {
  for (int sig : kStopSignals) {
    struct sigaction action {};
    action.sa_handler = on_stop_signal;
    sigemptyset(&action.sa_mask);
    // SA_RESTART: a signal must not turn a pending read or MPI progress call into an EINTR error.
    action.sa_flags = SA_RESTART;
    sigaction(sig, &action, nullptr);
  }
}

bool stop_requested() { return g_signal.load(std::memory_order_relaxed) != 0; }
int stop_signal() { return g_signal.load(std::memory_order_relaxed); }

const char* signal_name(int sig) {
  switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGUSR1: return "SIGUSR1";
    case 0: return "none";
  }
  return "a signal";
}

void request_stop(int sig) { g_signal.store(sig, std::memory_order_relaxed); }
void clear_stop_request() { g_signal.store(0, std::memory_order_relaxed); }

}  // namespace lockstep
