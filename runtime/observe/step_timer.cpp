#include "runtime/observe/step_timer.h"

#include <algorithm>

#include "runtime/base/error.h"
#include "runtime/observe/device_timer.h"

namespace lockstep {

std::vector<PhaseSpan> device_step_phases(const DeviceStepMarks& m) {
  std::vector<PhaseSpan> out;
  out.reserve(3 * m.micro.size() + 2);
  double device = 0;  // the latest device mark so far: the stream runs in order
  auto after = [&device](double t) { return device = std::max(device, t); };
  for (const DeviceStepMarks::Micro& u : m.micro) {
    out.push_back({Phase::data, u.data_begin, u.data_end});
    // The stream reaches the forward pass no earlier than the host had the data to queue it.
    const double f0 = after(std::max(u.forward_begin, u.data_end));
    const double f1 = after(u.forward_end);
    const double b1 = after(u.backward_end);
    out.push_back({Phase::forward, f0, f1});
    out.push_back({Phase::backward, f1, b1});
  }
  const double b1 = device;
  const double c1 = after(m.reduced);
  const double o1 = after(m.updated);
  if (!m.micro.empty()) {
    out.push_back({Phase::comm, b1, c1});
    out.push_back({Phase::optimizer, c1, o1});
  }
  return out;
}

void deliver_phases(const std::vector<PhaseSpan>& spans, StepTimes& times, const PhaseHook& hook) {
  for (const PhaseSpan& s : spans) {
    times[s.phase] += s.end - s.begin;
    if (hook) hook(s.phase, s.begin, s.end);
  }
}

StepTimer::StepTimer(StepTimes& times, const PhaseHook& hook, DeviceTimer* device)
    : times_(times), device_(device), hook_(hook) {}

StepTimer::~StepTimer() {
  if (device_ == nullptr) return;
  drop(current_);
  for (Pending& s : pending_) drop(s);
}

double StepTimer::start_step() {
  if (device_ != nullptr) {
    if (open_) drop(current_);  // the step before threw
    current_ = Pending{};
    collect(false);
  }
  open_ = true;
  t_ = steady_seconds();
  return t_;
}

void StepTimer::host_mark(Phase p) {
  const double now = steady_seconds();
  times_[p] += now - t_;
  if (hook_) hook_(p, t_, now);
  t_ = now;
}

StepTimer::Point StepTimer::device_mark() {
  t_ = steady_seconds();
  return Point{device_->record(), 0};
}

void StepTimer::data_ready() {
  if (device_ == nullptr) return host_mark(Phase::data);
  const double now = steady_seconds();
  Micro u;
  u.data_begin = t_;
  u.data_end = now;
  current_.micro.push_back(u);
  t_ = now;
}

void StepTimer::forward_begin() {
  if (device_ != nullptr && !current_.micro.empty())
    current_.micro.back().forward_begin = device_mark();
}

void StepTimer::forward_end() {
  if (device_ == nullptr) return host_mark(Phase::forward);
  if (!current_.micro.empty()) current_.micro.back().forward_end = device_mark();
}

void StepTimer::backward_progress() {
  if (device_ == nullptr || current_.micro.empty() || capturing_ != nullptr) return;
  Micro& u = current_.micro.back();
  if (u.backward_marked)
    device_->record_again(u.backward_end.id);
  else
    u.backward_end = device_mark();
  u.backward_marked = true;
}

void StepTimer::backward_end() {
  if (device_ == nullptr) return host_mark(Phase::backward);
  if (!current_.micro.empty() && !current_.micro.back().backward_marked) {
    current_.micro.back().backward_end = device_mark();
    current_.micro.back().backward_marked = true;
  }
  t_ = steady_seconds();
}

void StepTimer::ahead_taken() {
  if (device_ == nullptr) return host_mark(Phase::data);
  t_ = steady_seconds();
}

void StepTimer::reduced() {
  if (device_ == nullptr) return host_mark(Phase::comm);
  current_.reduced = device_mark();
}

double StepTimer::updated() {
  open_ = false;
  if (device_ == nullptr) {
    host_mark(Phase::optimizer);
    return t_;
  }
  current_.updated = device_mark();
  if (capturing_ != nullptr) captured_[capturing_] = current_;
  pending_.push_back(std::move(current_));
  current_ = Pending{};
  return t_;
}

void StepTimer::resolve(Point& p) {
  if (p.id < 0) return;
  p.t = device_->seconds(p.id);
  p.id = -1;
}

void StepTimer::resolve(Pending& s) {
  for (Micro& u : s.micro) {
    resolve(u.forward_begin);
    resolve(u.forward_end);
    resolve(u.backward_end);
  }
  resolve(s.reduced);
  resolve(s.updated);
}

void StepTimer::drop(Pending& s) {
  auto give = [this](Point& p) {
    if (p.id >= 0) device_->drop(p.id);
    p.id = -1;
  };
  for (Micro& u : s.micro) {
    give(u.forward_begin);
    give(u.forward_end);
    give(u.backward_end);
  }
  give(s.reduced);
  give(s.updated);
}

void StepTimer::deliver(const Pending& s) {
  DeviceStepMarks m;
  for (const Micro& u : s.micro)
    m.micro.push_back(
        {u.data_begin, u.data_end, u.forward_begin.t, u.forward_end.t, u.backward_end.t});
  m.reduced = s.reduced.t;
  m.updated = s.updated.t;
  deliver_phases(device_step_phases(m), times_, hook_);
}

void StepTimer::collect(bool synced) {
  if (device_ == nullptr) return;
  // The stream runs in order: a step is complete once its last event is, and no later step is
  // complete before an earlier one.
  while (!pending_.empty() && (synced || device_->done(pending_.front().updated.id))) {
    resolve(pending_.front());
    deliver(pending_.front());
    pending_.pop_front();
  }
  // Reading the open step's marks now frees their events, so that the timer may recalibrate.
  if (synced && open_) resolve(current_);
}

void StepTimer::flush() {
  if (device_ == nullptr || pending_.empty()) return;
  device_->wait(pending_.back().updated.id);
  collect(true);
}

void StepTimer::for_each_id(const Pending& s, const std::function<void(int)>& f) const {
  auto each = [&f](const Point& p) {
    if (p.id >= 0) f(p.id);
  };
  for (const Micro& u : s.micro) {
    each(u.forward_begin);
    each(u.forward_end);
    each(u.backward_end);
  }
  each(s.reduced);
  each(s.updated);
}

void StepTimer::begin_capture(const void* key) {
  if (device_ != nullptr) capturing_ = key;
}

void StepTimer::end_capture(bool ok) {
  const void* key = capturing_;
  capturing_ = nullptr;
  if (device_ == nullptr || ok) return;
  // Nothing of the capture ran: its events hold no times. The step runs again uncaptured.
  std::vector<int> ids;
  auto found = captured_.find(key);
  if (found != captured_.end()) {  // updated() ran inside the capture: the step is pending
    for_each_id(found->second, [&ids](int id) { ids.push_back(id); });
    drop(pending_.back());
    pending_.pop_back();
    captured_.erase(found);
  } else {
    for_each_id(current_, [&ids](int id) { ids.push_back(id); });
    drop(current_);
  }
  for (int id : ids) device_->unpin(id);
  current_ = Pending{};
  open_ = true;
  t_ = steady_seconds();
}

double StepTimer::replayed(const void* key) {
  open_ = false;
  t_ = steady_seconds();
  if (device_ == nullptr) return t_;
  auto found = captured_.find(key);
  if (found == captured_.end()) throw Error("StepTimer::replayed: no capture for this graph");
  // The clock may take a new reference only while nothing is outstanding, before the events of
  // this replay are counted.
  device_->calibrate_if_stale();
  Pending s = found->second;
  if (!current_.micro.empty() && !s.micro.empty()) {
    s.micro.front().data_begin = current_.micro.front().data_begin;
    s.micro.front().data_end = current_.micro.front().data_end;
  }
  for_each_id(s, [this](int id) { device_->rearm(id); });
  pending_.push_back(std::move(s));
  current_ = Pending{};
  return t_;
}

void StepTimer::forget_captures() {
  if (device_ != nullptr)
    for (auto& [key, s] : captured_) for_each_id(s, [this](int id) { device_->unpin(id); });
  captured_.clear();
}

}  // namespace lockstep
