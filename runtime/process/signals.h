// Stop requests from the outside: SIGTERM (what Slurm and most schedulers send before a time
// limit), SIGINT (Ctrl-C) and SIGUSR1 (which mpirun forwards to every rank, while it turns a
// SIGTERM of its own into killing the job). The handlers only set a flag; the trainer polls it once
// per step, agrees on it with the other ranks (a rank may receive the signal a step later than
// another), finishes the step, writes a checkpoint and exits cleanly.
//
// A second signal of the same kind while a stop is pending restores the default action and
// re-raises it: a user who presses Ctrl-C twice gets the immediate exit they expect.
//
// Thread-safety: the flag is a lock-free atomic; install once from the main thread.
// No collective calls: the trainer agrees on the flag (step_guard.h).
#pragma once

namespace lockstep {

// Installs the handlers (idempotent).
void install_stop_handlers();

// Whether a stop signal arrived since start (or the last clear_stop_request), and which one
// (0 when none).
bool stop_requested();
int stop_signal();
const char* signal_name(int sig);  // "SIGTERM", ...

// Sets or clears the flag as a handler would (tests; also lets code request a stop itself).
void request_stop(int sig);
void clear_stop_request();

}  // namespace lockstep
