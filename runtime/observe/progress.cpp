#include "runtime/observe/progress.h"

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "runtime/base/error.h"

namespace lockstep {

namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// JSON has no NaN or infinity: a diverged loss is written as null.
std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

}  // namespace

double bits_per_byte(double loss) { return loss / std::log(2.0); }

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  long t = std::lround(s);
  char buf[32];
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", t / 3600, (t / 60) % 60);
  else if (t >= 60)
    std::snprintf(buf, sizeof buf, "%ldm%02lds", t / 60, t % 60);
  else
    std::snprintf(buf, sizeof buf, "%lds", t);
  return buf;
}

Progress::Progress(bool enabled, bool bar, bool classification, const std::string& metrics_path,
                   bool bits_per_byte, bool append_metrics)
    : enabled_(enabled), bar_(bar), classification_(classification), bits_per_byte_(bits_per_byte) {
  if (metrics_path.empty()) return;
  metrics_path_ = metrics_path;
  metrics_ = std::fopen(metrics_path.c_str(), append_metrics ? "a" : "w");
  if (!metrics_)
    throw UsageError("--metrics: cannot write '" + metrics_path + "': " + std::strerror(errno));
}

Progress::~Progress() {
  if (metrics_) std::fclose(metrics_);
}

void Progress::write_metrics(const std::string& line) {
  errno = 0;
  if (std::fputs(line.c_str(), metrics_) >= 0 && std::fflush(metrics_) == 0) return;
  const int error = errno;
  // Later lines would be lost as silently: the run ends here (its checkpoints so far are kept).
  std::fclose(metrics_);
  metrics_ = nullptr;
  throw std::runtime_error("--metrics " + metrics_path_ + ": writing a line failed (" +
                           (error != 0 ? std::strerror(error) : "an I/O error") +
                           "); the lines before it are in the file");
}

void Progress::report(const ProgressReport& r) {
  last_ = r;
  if (!enabled_) {
    // nothing on the terminal; the metrics line below all the same
  } else if (bar_) {
    draw_bar(r);
  } else {
    std::fprintf(stderr, "epoch %d/%d step %lld/%lld loss %.4f", r.epoch, r.epochs,
                 static_cast<long long>(r.step_in_epoch), static_cast<long long>(r.steps_per_epoch),
                 r.loss);
    if (bits_per_byte_) std::fprintf(stderr, " per token bpb %.4f", bits_per_byte(r.loss));
    if (classification_) std::fprintf(stderr, " acc %.4f", r.accuracy);
    std::fprintf(stderr, " lr %.3g %.0f samples/s data %.0f%% eta %s\n", r.lr, r.samples_per_second,
                 100.0 * r.data_wait_share, format_duration(r.eta_seconds).c_str());
  }
  if (metrics_) {
    std::string line = "{\"kind\":\"train\",\"step\":" + std::to_string(r.global_step) +
                       ",\"epoch\":" + std::to_string(r.epoch) + ",\"loss\":" + json_number(r.loss);
    if (bits_per_byte_) line += ",\"bits_per_byte\":" + json_number(bits_per_byte(r.loss));
    if (classification_) line += ",\"accuracy\":" + json_number(r.accuracy);
    line += ",\"lr\":" + json_number(r.lr) +
            ",\"samples_per_sec\":" + json_number(r.samples_per_second) +
            ",\"data_wait_share\":" + json_number(r.data_wait_share) + "}\n";
    write_metrics(line);
  }
}

void Progress::tick(const ProgressReport& r) {
  if (!enabled_ || !bar_) return;
  double t = now_seconds();
  if (t - last_draw_ < 0.2) return;
  ProgressReport shown = last_;
  shown.epoch = r.epoch;
  shown.epochs = r.epochs;
  shown.step_in_epoch = r.step_in_epoch;
  shown.steps_per_epoch = r.steps_per_epoch;
  shown.eta_seconds = r.eta_seconds;
  if (r.samples_per_second > 0) shown.samples_per_second = r.samples_per_second;
  draw_bar(shown);
}

void Progress::draw_bar(const ProgressReport& r) {
  constexpr int kWidth = 24;
  double frac = r.steps_per_epoch > 0
                    ? static_cast<double>(r.step_in_epoch) / static_cast<double>(r.steps_per_epoch)
                    : 0.0;
  int filled = static_cast<int>(frac * kWidth);
  char bar[kWidth + 1];
  for (int i = 0; i < kWidth; ++i) bar[i] = i < filled ? '#' : '.';
  bar[kWidth] = '\0';
  std::fprintf(stderr, "\r\033[Kepoch %d/%d [%s] %lld/%lld", r.epoch, r.epochs, bar,
               static_cast<long long>(r.step_in_epoch), static_cast<long long>(r.steps_per_epoch));
  if (last_.global_step > 0) {  // figures exist once the first report has been reduced
    std::fprintf(stderr, " loss %.4f", r.loss);
    if (bits_per_byte_) std::fprintf(stderr, " bpb %.3f", bits_per_byte(r.loss));
    if (classification_) std::fprintf(stderr, " acc %.3f", r.accuracy);
    std::fprintf(stderr, " %.0f samples/s", r.samples_per_second);
  }
  std::fprintf(stderr, " eta %s", format_duration(r.eta_seconds).c_str());
  std::fflush(stderr);
  bar_open_ = true;
  last_draw_ = now_seconds();
}

void Progress::finish_line() {
  if (bar_open_) std::fputc('\n', stderr);
  bar_open_ = false;
}

void Progress::note(const std::string& text, const std::string& json) {
  if (enabled_) {
    finish_line();
    std::fprintf(stderr, "%s\n", text.c_str());
  }
  if (metrics_) {
    write_metrics(json + "\n");
  }
}

void Progress::epoch_end(const EpochSummary& s, int epochs) {
  if (enabled_) {
    finish_line();
    std::printf("epoch %d/%d: train_loss=%.4f", s.epoch, epochs, s.train_loss);
    if (classification_) std::printf(" train_accuracy=%.4f", s.train_accuracy);
    if (bits_per_byte_) std::printf(" train_bits_per_byte=%.4f", bits_per_byte(s.train_loss));
    print_test(s.test);
    std::printf(" time=%.1fs samples/s=%.0f\n", s.seconds, s.samples_per_second);
    std::fflush(stdout);
  }
  if (metrics_) {
    std::string line = "{\"kind\":\"eval\",\"step\":" + std::to_string(s.global_step) +
                       ",\"epoch\":" + std::to_string(s.epoch) +
                       ",\"train_loss\":" + json_number(s.train_loss);
    if (classification_) line += ",\"train_accuracy\":" + json_number(s.train_accuracy);
    if (bits_per_byte_)
      line += ",\"train_bits_per_byte\":" + json_number(bits_per_byte(s.train_loss));
    line += test_json(s.test) + ",\"epoch_seconds\":" + json_number(s.seconds) +
            ",\"samples_per_sec\":" + json_number(s.samples_per_second) + "}\n";
    write_metrics(line);
  }
}

void Progress::print_test(const EvalResult& e) const {
  std::printf(" test_loss=%.4f", e.loss);
  if (classification_) std::printf(" test_accuracy=%.4f", e.accuracy);
  if (bits_per_byte_) std::printf(" test_bits_per_byte=%.4f", bits_per_byte(e.loss));
}

std::string Progress::test_json(const EvalResult& e) const {
  std::string members = ",\"test_loss\":" + json_number(e.loss);
  if (classification_) members += ",\"test_accuracy\":" + json_number(e.accuracy);
  if (bits_per_byte_) members += ",\"test_bits_per_byte\":" + json_number(bits_per_byte(e.loss));
  return members;
}

void Progress::step_eval(int64_t step, int epoch, const EvalResult& e) {
  if (enabled_) {
    finish_line();
    std::printf("step %lld (epoch %d):", static_cast<long long>(step), epoch);
    print_test(e);
    std::printf("\n");
    std::fflush(stdout);
  }
  if (metrics_) {
    const std::string line = "{\"kind\":\"eval\",\"step\":" + std::to_string(step) +
                             ",\"epoch\":" + std::to_string(epoch) + test_json(e) + "}\n";
    write_metrics(line);
  }
}

}  // namespace lockstep
