#include "runtime/train/device_step.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <string>

#include "kernels/cuda/memory.h"
#include "kernels/step/loss.h"
#include "kernels/step/optimizer.h"
#include "runtime/base/buffer.h"
#include "runtime/base/error.h"
#include "runtime/base/precision.h"
#include "runtime/model/layers.h"
#include "runtime/observe/device_timer.h"
#include "runtime/observe/gpu_trace.h"
#include "runtime/process/device.h"

namespace lockstep {
namespace {

// Page-locked host memory for count values of T.
template <class T>
class Pinned {
 public:
  explicit Pinned(size_t count)
      : ptr_(static_cast<T*>(kernels::cuda_host_alloc(count * sizeof(T)))), count_(count) {}
  ~Pinned() { kernels::cuda_host_free(ptr_); }
  Pinned(const Pinned&) = delete;
  Pinned& operator=(const Pinned&) = delete;
  T* data() const { return ptr_; }
  size_t size() const { return count_; }

 private:
  T* ptr_;
  size_t count_;
};

// A CUDA handle made by Create with this object and destroyed with it.
template <class Handle, Handle (*Create)(), void (*Destroy)(Handle) noexcept>
class Owned {
 public:
  Owned() : h_(Create()) {}
  ~Owned() { Destroy(h_); }
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  Handle get() const { return h_; }

 private:
  Handle h_;
};

using Event = Owned<cudaEvent_t, kernels::cuda_event_create, kernels::cuda_event_destroy>;
using Stream = Owned<cudaStream_t, kernels::cuda_stream_create, kernels::cuda_stream_destroy>;

// One batch's worth of page-locked staging and device memory. copied: recorded on the copy stream
// after the upload; consumed: on the compute stream after the last work that reads the slot.
struct Slot {
  Slot(size_t x, size_t y, size_t weights)
      : host_x(x),
        host_y(y * sizeof(float)),
        host_mask(weights),
        x(DeviceKind::cuda, x),
        y(DeviceKind::cuda, y),
        mask(DeviceKind::cuda, weights) {}
  Pinned<float> host_x;
  Pinned<unsigned char> host_y;  // int32 labels or float targets: both 4 bytes per value
  Pinned<float> host_mask;       // the loss's weights: each row's mask once per position
  Buffer<float> x, y, mask;      // y holds the labels' or targets' bytes
  Event copied, consumed;
  bool used = false;
};

// Device scalars: a LossTotals (4 doubles), the gradient norm, then (captured steps at several
// ranks) the loss summed over the ranks.
constexpr size_t kNorm = 4;
constexpr size_t kGlobalLoss = kNorm + 1;
constexpr size_t kScalars = kGlobalLoss + 1;
static_assert(sizeof(LossTotals) == kNorm * sizeof(double));

template <class T>
void fill_pinned(void* pinned, const std::vector<T>& v, size_t count, size_t capacity,
                 const char* what) {
  if (v.size() != count || count > capacity)
    throw Error(std::string("DeviceStep::upload: the batch's ") + what + " hold " +
                std::to_string(v.size()) + " values, expected " + std::to_string(count) +
                " (room for " + std::to_string(capacity) + ")");
  std::memcpy(pinned, v.data(), count * sizeof(T));
}

}  // namespace

void require_cuda_training() {
  if (!layers_available(DeviceKind::cuda)) throw UsageError(gpu_training_missing());
  std::string why;
  if (cuda_device_count(&why) == 0) throw UsageError("--device cuda: no CUDA device: " + why);
}

struct DeviceStep::Impl {
  explicit Impl(const StepShape& shape)
      : input_size(shape.input_size),
        outputs(shape.outputs),
        classification(shape.classification),
        positions(static_cast<size_t>(shape.positions)),
        y_width(classification ? positions : positions * static_cast<size_t>(outputs)),
        scalars(DeviceKind::cuda, kScalars),
        timer(compute.get()),
        compute_trace(compute.get(), "GPU stream: compute"),
        copy_trace(copy.get(), "GPU stream: copy") {
    const size_t rows = static_cast<size_t>(shape.max_rows);
    for (auto& s : slots)
      s = std::make_unique<Slot>(rows * input_size, rows * y_width, rows * positions);
  }
  size_t input_size;
  int outputs;
  bool classification;
  size_t positions;  // predictions per row (StepShape)
  size_t y_width;    // values of y per row
  Stream compute, copy;
  std::unique_ptr<Slot> slots[2];
  int next = 0, current = -1;
  // The staged slot (-1: none) and its batch: the x buffer, epoch and step it was staged from.
  int staged = -1;
  const float* staged_x = nullptr;
  int staged_epoch = 0;
  int64_t staged_step = 0, staged_rows = 0;
  // The slot the next copy goes to: the one after the last, or, while a batch waits staged, the
  // other one.
  int take_slot() {
    if (staged >= 0) return staged ^ 1;
    const int s = next;
    next ^= 1;
    return s;
  }
  // Host staging and the copy of b into slot `index` on the copy stream; returns the slot.
  Slot& copy_in(int index, const Batch& b);
  int current_rows = 0;
  double samples = 0;  // the host's count of valid rows * positions since the last finish()
  Buffer<double> scalars;
  DeviceTimer timer;
  GpuTrace compute_trace, copy_trace;
  LossTotals* sums() { return reinterpret_cast<LossTotals*>(scalars.data()); }
  // The totals and the norm read back from the device (kNorm + 1 values): the step's outcome.
  Step::Outcome outcome(const double* host, bool with_grads);
  // Checks b against the last upload and runs enqueue(its slot, predictions) as the step's loss.
  template <class Enqueue>
  void loss(const Batch& b, Enqueue enqueue);

  // CUDA graphs: the captured steps by key, the capture in progress, the page-locked memory
  // each replay's read-back lands in, and whether the graphs gate on the loss over all ranks
  // (StepGraphs::share_loss) or on this rank's totals.
  bool capturing = false;
  std::map<const void*, cudaGraphExec_t> graphs;
  Pinned<double> readback{kScalars};
  bool shared_loss = false;
  class Graphs;
  std::unique_ptr<Graphs> graphs_view;
  void clear_graphs() noexcept {
    for (auto& [key, g] : graphs) kernels::cuda_graph_destroy(g);
    graphs.clear();
  }
};

class DeviceStep::Impl::Graphs final : public StepGraphs {
 public:
  explicit Graphs(Impl& m) : m_(m) {}

  void begin() override {
    kernels::cuda_capture_begin(m_.compute.get());
    m_.capturing = true;
  }

  void share_loss(Communicator& grads) override {
    m_.shared_loss = grads.size() > 1;
    if (!m_.shared_loss) return;
    // Its handle is dropped: the collective is part of the capture, and the gradients' join
    // (BucketReducer::join) joins its stream back before the gate is read.
    grads.all_reduce_async(&m_.sums()->loss_sum, m_.scalars.data() + kGlobalLoss, 1, DType::f64,
                           ReduceOp::sum);
  }

  void gradient_norm(const float* grads, size_t n) override {
    kernels::global_norm_device_cuda(grads, n, norm_slot(), m_.compute.get());
  }
  double* norm_slot() override { return m_.scalars.data() + kNorm; }

  // [norm, loss over the ranks] once shared; else [this rank's totals, norm].
  const double* gate() const override {
    return m_.shared_loss ? m_.scalars.data() + kNorm : m_.scalars.data();
  }
  int gates() const override { return m_.shared_loss ? 2 : static_cast<int>(kNorm + 1); }

  bool applied() const override {
    const double* g = m_.readback.data() + (m_.shared_loss ? kNorm : 0);
    return std::all_of(g, g + gates(), [](double v) { return std::isfinite(v); });
  }

  std::string end(const void* key) override {
    cudaStream_t stream = m_.compute.get();
    std::string why;
    try {
      // The step's one read-back, part of the graph: the totals and the norm into page-locked
      // memory, then new totals.
      kernels::cuda_copy_to_host_async(m_.readback.data(), m_.scalars.data(),
                                       kScalars * sizeof(double), stream);
      kernels::cuda_zero(m_.scalars.data(), kNorm * sizeof(double), stream);
    } catch (const std::exception& e) {
      why = e.what();
    }
    m_.capturing = false;
    if (!why.empty()) {
      kernels::cuda_capture_discard(stream);
      return why;
    }
    cudaGraphExec_t g = kernels::cuda_capture_end(stream, &why);
    if (g == nullptr) return why;
    m_.graphs.emplace(key, g);  // a key is captured once: the Trainer replays a ready() one
    return "";
  }

  void abort() noexcept override {
    kernels::cuda_capture_discard(m_.compute.get());
    m_.capturing = false;
  }

  bool ready(const void* key) const override { return m_.graphs.count(key) > 0; }

  void launch(const void* key, const Batch& b) override {
    auto found = m_.graphs.find(key);
    if (found == m_.graphs.end()) throw Error("DeviceStep: no captured step for this input slot");
    kernels::cuda_graph_launch(found->second, m_.compute.get());
    m_.samples += static_cast<double>(b.valid) * static_cast<double>(m_.positions);
  }

  Step::Outcome outcome() override { return m_.outcome(m_.readback.data(), true); }

  void clear() noexcept override { m_.clear_graphs(); }

 private:
  Impl& m_;
};

DeviceStep::DeviceStep(const StepShape& shape) : impl_(std::make_unique<Impl>(shape)) {
  impl_->graphs_view = std::make_unique<Impl::Graphs>(*impl_);
}

DeviceStep::~DeviceStep() {
  // The device buffers are freed after the queued work that reads them.
  if (impl_) {
    try {
      kernels::cuda_capture_discard(impl_->compute.get());
      kernels::cuda_stream_synchronize(impl_->compute.get());
      kernels::cuda_stream_synchronize(impl_->copy.get());
    } catch (...) {
      // A broken context has already been reported by the call that broke it.
    }
    impl_->clear_graphs();
  }
}

StepGraphs* DeviceStep::graphs() { return impl_->graphs_view.get(); }

ModelPlacement DeviceStep::placement(Precision precision) {
  return {DeviceKind::cuda, impl_->compute.get(), precision, &impl_->compute_trace};
}
DeviceTimer* DeviceStep::timer() { return &impl_->timer; }
GpuTrace* DeviceStep::trace() { return &impl_->compute_trace; }

Slot& DeviceStep::Impl::copy_in(int index, const Batch& b) {
  Slot& s = *slots[index];
  const size_t rows = static_cast<size_t>(b.rows);
  // The slot's pinned memory may still feed its previous copy; its device memory may still be
  // read by the compute work queued before (the copy stream waits for that, not the host).
  if (s.used) kernels::cuda_event_synchronize(s.copied.get());
  fill_pinned(s.host_x.data(), b.x, rows * input_size, s.host_x.size(), "inputs");
  if (classification)
    fill_pinned(s.host_y.data(), b.labels, rows * y_width, s.host_y.size() / sizeof(int32_t),
                "labels");
  else
    fill_pinned(s.host_y.data(), b.targets, rows * y_width, s.host_y.size() / sizeof(float),
                "targets");
  // The loss weighs each prediction: a row's mask once per position (no allocation per step).
  const size_t weights = rows * positions;
  weights_per_position(b, positions, s.host_mask.data(), s.host_mask.size(), "DeviceStep::upload");
  cudaStream_t stream = copy.get();
  if (s.used) kernels::cuda_stream_wait_event(stream, s.consumed.get());
  copy_trace.begin_span(
      "batch copy", "data", -1,
      static_cast<int64_t>((rows * (input_size + y_width) + weights) * sizeof(float)));
  kernels::cuda_copy_to_device_async(s.x.data(), s.host_x.data(), rows * input_size * sizeof(float),
                                     stream);
  kernels::cuda_copy_to_device_async(s.y.data(), s.host_y.data(), rows * y_width * sizeof(float),
                                     stream);
  kernels::cuda_copy_to_device_async(s.mask.data(), s.host_mask.data(), weights * sizeof(float),
                                     stream);
  copy_trace.end();
  kernels::cuda_event_record(s.copied.get(), stream);
  s.used = true;
  return s;
}

void DeviceStep::stage(const Batch& b) {
  Impl& m = *impl_;
  m.staged = -1;  // a batch staged before and never uploaded is dropped
  const int index = m.take_slot();
  m.copy_in(index, b);
  m.staged = index;
  m.staged_x = b.x.data();
  m.staged_epoch = b.epoch;
  m.staged_step = b.step;
  m.staged_rows = b.rows;
}

const float* DeviceStep::upload(const Batch& b) {
  Impl& m = *impl_;
  int index = -1;
  if (m.staged >= 0 && b.x.data() == m.staged_x && b.epoch == m.staged_epoch &&
      b.step == m.staged_step && b.rows == m.staged_rows) {
    index = m.staged;  // its copy is queued already
    m.staged = -1;
    m.next = index ^ 1;
  } else {
    index = m.take_slot();
    m.copy_in(index, b);
  }
  Slot& s = *m.slots[index];
  kernels::cuda_stream_wait_event(m.compute.get(), s.copied.get());
  m.current = index;
  m.current_rows = static_cast<int>(b.rows);
  return s.x.data();
}

template <class Enqueue>
void DeviceStep::Impl::loss(const Batch& b, Enqueue enqueue) {
  const int rows = static_cast<int>(b.rows);
  if (current < 0 || rows > current_rows)
    throw Error("DeviceStep::loss: " + std::to_string(rows) + " rows, but the last upload had " +
                std::to_string(current_rows));
  compute_trace.begin_span("loss", "forward");
  enqueue(*slots[current], rows * static_cast<int>(positions));  // one per row and position
  compute_trace.end();
  // A captured loss counts its samples at each launch of the graph instead.
  if (!capturing) samples += static_cast<double>(b.valid) * static_cast<double>(positions);
}

void DeviceStep::loss(const Batch& b, const float* out, float scale, float* dout) {
  Impl& m = *impl_;
  m.loss(b, [&](const Slot& s, int predictions) {
    if (m.classification)
      kernels::softmax_cross_entropy_sums_cuda(out, reinterpret_cast<const int32_t*>(s.y.data()),
                                               s.mask.data(), predictions, m.outputs, scale, dout,
                                               m.sums(), m.compute.get());
    else
      kernels::mse_sums_cuda(out, s.y.data(), s.mask.data(), predictions, m.outputs, scale, dout,
                             m.sums(), m.compute.get());
  });
}

void DeviceStep::loss_bf16(const Batch& b, const uint16_t* out, float scale, uint16_t* dout) {
  Impl& m = *impl_;
  if (!m.classification) throw Error("DeviceStep::loss_bf16: bf16 outputs are a classifier's");
  m.loss(b, [&](const Slot& s, int predictions) {
    kernels::softmax_cross_entropy_bf16_sums_cuda(out, reinterpret_cast<const int32_t*>(s.y.data()),
                                                  s.mask.data(), predictions, m.outputs, scale,
                                                  dout, m.sums(), m.compute.get());
  });
}

void DeviceStep::release() {
  Impl& m = *impl_;
  if (m.current >= 0)
    kernels::cuda_event_record(m.slots[m.current]->consumed.get(), m.compute.get());
}

Step::Outcome DeviceStep::finish(const float* grads, size_t n) {
  Impl& m = *impl_;
  double* norm = m.scalars.data() + kNorm;
  if (grads != nullptr) {
    m.compute_trace.begin_span("gradient norm", "optimizer");
    kernels::global_norm_device_cuda(grads, n, norm, m.compute.get());
    m.compute_trace.end();
  }
  double host[kNorm + 1] = {};
  // A synchronous copy through the legacy default stream: it runs after the compute stream's work.
  m.scalars.read(host, 0, kNorm + 1);
  kernels::cuda_zero(m.scalars.data(), kNorm * sizeof(double), m.compute.get());
  return m.outcome(host, grads != nullptr);
}

Step::Outcome DeviceStep::Impl::outcome(const double* host, bool with_grads) {
  Outcome o;
  std::memcpy(static_cast<void*>(&o.totals), host, sizeof o.totals);
  if (o.totals.invalid_labels > 0)
    throw Error(std::to_string(static_cast<int64_t>(o.totals.invalid_labels)) +
                " sample(s) of a batch have a label outside [0, " + std::to_string(outputs) +
                "): the dataset's labels do not match its num_classes");
  o.totals.samples = samples;
  samples = 0;
  o.grads_finite = !with_grads || std::isfinite(host[kNorm]);
  return o;
}

void DeviceStep::clip(float* grads, size_t n, double max_norm) {
  Impl& m = *impl_;
  m.compute_trace.begin_span("clip", "optimizer");
  kernels::clip_by_device_norm_cuda(grads, n, m.scalars.data() + kNorm, max_norm, m.compute.get());
  m.compute_trace.end();
}

void DeviceStep::poison_loss() {
  static const double inf = std::numeric_limits<double>::infinity();
  kernels::cuda_copy_to_device_async(&impl_->sums()->loss_sum, &inf, sizeof inf,
                                     impl_->compute.get());
}

}  // namespace lockstep
