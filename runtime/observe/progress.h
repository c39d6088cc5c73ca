// What rank 0 tells the user while training, and the metrics file.
//
// Progress goes to stderr: on a terminal a bar redrawn in place (epoch, step, loss, accuracy,
// samples/s, ETA), otherwise one plain line per report, so logs of batch jobs stay readable. Epoch
// summaries go to stdout as key=value pairs a script can read. With a metrics path, every report
// and every evaluation is also one JSON object per line (JSON Lines), flushed as written. For a
// byte-level language model (bits_per_byte) the losses are per token, and every view also gives
// bits per byte: the loss in nats / ln 2.
// Only the rank that constructs it with enabled == true prints; others make a silent one.
// Used by one thread.
// No collective calls: it prints figures already reduced (run_reporter.h).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace lockstep {

struct EvalResult {
  double loss = 0;      // mean over the split (per token for a token split)
  double accuracy = 0;  // classification only
  int64_t samples = 0;  // rows evaluated (a token split's sequences, not its tokens)
};

struct EpochSummary {
  int epoch = 0;  // 1-based, as printed
  int64_t global_step = 0;
  double train_loss = 0, train_accuracy = 0;
  EvalResult test;
  double seconds = 0, samples_per_second = 0;
};

struct ProgressReport {
  int epoch = 1, epochs = 1;                       // 1-based
  int64_t step_in_epoch = 0, steps_per_epoch = 0;  // steps done in this epoch
  int64_t global_step = 0, total_steps = 0;
  double loss = 0, accuracy = 0, lr = 0;  // loss/accuracy: reduced over ranks since the last report
  double samples_per_second = 0;
  double data_wait_share = 0;  // share of step time spent waiting for data, 0..1
  double eta_seconds = 0;
};

class Progress {
 public:
  // `enabled`: this rank prints progress (lines or a bar) and epoch summaries. Opens the metrics
  // file when the path is non-empty, printing or not (a batch job's --progress none keeps its
  // --metrics): truncated, or with `append_metrics` (a resumed run) appended to; throws UsageError
  // naming --metrics when it cannot.
  Progress(bool enabled, bool bar, bool classification, const std::string& metrics_path,
           bool bits_per_byte = false, bool append_metrics = false);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // A reduced report (every log_every steps): a line or a bar redraw, and a JSON line.
  void report(const ProgressReport& r);
  // Every step: moves the bar (at most a few redraws a second); nothing in plain mode.
  void tick(const ProgressReport& r);
  void epoch_end(const EpochSummary& s, int epochs);
  // An evaluation after global step `step` of 1-based `epoch`, between epoch ends: a line on
  // stdout and a JSON line of kind "eval" with the test figures only.
  void step_eval(int64_t step, int epoch, const EvalResult& e);
  // Ends a bar line so what follows starts on a fresh line.
  void finish_line();
  // Any other report (the straggler report): `text` as one stderr line, `json` (one object,
  // no newline) as one metrics line.
  void note(const std::string& text, const std::string& json);

 private:
  void draw_bar(const ProgressReport& r);
  // An evaluation's figures: " test_loss=... test_accuracy=... test_bits_per_byte=..." (those
  // this run has) on stdout, and as JSON members.
  void print_test(const EvalResult& e) const;
  std::string test_json(const EvalResult& e) const;

  bool enabled_, bar_, classification_, bits_per_byte_;
  // Writes a line of --metrics and flushes it; throws std::runtime_error naming the file when
  // either fails (a full disk, /dev/full).
  void write_metrics(const std::string& line);
  std::FILE* metrics_ = nullptr;
  std::string metrics_path_;
  double last_draw_ = -1;
  bool bar_open_ = false;
  ProgressReport last_;  // the last reduced figures, shown by the bar between reports
};

// A loss in nats per byte-level token, in bits per byte.
double bits_per_byte(double loss);

// "1h02m", "3m05s", "12s".
std::string format_duration(double seconds);

}  // namespace lockstep
