// MPI backend of Communicator.
//
// Collectives are queued to one progress thread that runs the blocking MPI calls in order. Using
// the blocking calls (not MPI_I*) keeps Open MPI's tuned algorithms; the thread lets the caller
// compute meanwhile and lets wait() give up at a deadline instead of sitting inside MPI forever.
// Needs MPI_THREAD_MULTIPLE; where the library gives less, collectives run on the caller's thread
// (no overlap, and a deadline can only be checked after the call returns). Small host collectives
// (at most 64 KiB) run as nonblocking MPI calls instead (mpi_inline.h), and their blocking form
// skips the hand-off: it runs on the calling thread, with its deadline, at any thread level.
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "kernels/cuda/memory.h"
#include "runtime/base/communicator.h"
#include "runtime/base/cuda_device.h"
#include "runtime/base/error.h"
#include "runtime/comm/mpi_inline.h"
#include "runtime/comm/mpi_ops.h"
#include "runtime/observe/nvtx.h"
#include "runtime/observe/trace.h"

namespace lockstep {

namespace {

using namespace mpi_detail;

// Staging copies of device buffers (MpiCommOptions::device_buffers). They run on the progress
// thread, which must first take the GPU the process activated; the copies go through the legacy
// default stream, so they follow the work of every blocking stream that wrote the buffer.
void to_host(void* host_dst, const void* device_src, size_t bytes) {
  use_active_device();
  kernels::cuda_copy_to_host(host_dst, device_src, bytes);
}

void to_device(void* device_dst, const void* host_src, size_t bytes) {
  use_active_device();
  kernels::cuda_copy_to_device(device_dst, host_src, bytes);
}

constexpr size_t kMaxChunk = size_t{1} << 30;  // elements per MPI call (MPI counts are int)

struct WorkState {
  std::mutex mutex;
  std::condition_variable cv;
  bool done = false;
  std::string error;
};

class MpiWork : public Work {
 public:
  MpiWork(std::shared_ptr<WorkState> state, std::string what, std::function<void()> on_timeout)
      : state_(std::move(state)), what_(std::move(what)), on_timeout_(std::move(on_timeout)) {}

  void wait(Millis timeout) override {
    std::unique_lock<std::mutex> lock(state_->mutex);
    if (!state_->cv.wait_for(lock, timeout, [&] { return state_->done; })) {
      on_timeout_();
      throw missed_deadline(what_, timeout);
    }
    if (!state_->error.empty()) throw Error(state_->error);
  }

  bool done() override {
    std::lock_guard<std::mutex> lock(state_->mutex);
    return state_->done;
  }

 private:
  std::shared_ptr<WorkState> state_;
  std::string what_;
  std::function<void()> on_timeout_;
};

class MpiCommunicator : public Communicator {
 public:
  MpiCommunicator(const MpiCommOptions& options) : options_(options) {
    LS_CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &comm_));
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    LS_CHECK_MPI(MPI_Comm_rank(comm_, &rank_));
    LS_CHECK_MPI(MPI_Comm_size(comm_, &size_));
    inline_ = std::make_unique<InlineCollectives>(comm_, rank_, size_);
    int provided = MPI_THREAD_SINGLE;
    MPI_Query_thread(&provided);
    threaded_ = provided >= MPI_THREAD_MULTIPLE;
    if (threaded_) worker_ = std::thread([this] { run_worker(); });
  }

  ~MpiCommunicator() override {
    if (threaded_) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_ = true;
      }
      cv_.notify_all();
      // A collective that timed out may never return: then the thread is left behind (the job is
      // being aborted anyway) rather than joined forever.
      if (stuck_ && busy_)
        worker_.detach();
      else
        worker_.join();
    }
    // Likewise a collective the calling thread gave up on (mpi_inline.h) may still be pending: MPI
    // may still write into its buffers (a late peer joins, and MPI_Finalize progresses it), so
    // they are kept for the rest of the process, never freed under MPI (at 6 ranks a late
    // broadcast's staging, freed here, corrupted the heap in MPI_Finalize).
    const bool pending = inline_->abandoned_pending();
    if (pending) static_cast<void>(inline_.release());
    if (!(stuck_ && busy_) && !pending) MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Backend backend() const override { return Backend::mpi; }
  bool device_buffers() const override { return options_.device_buffers; }
  // The calling thread tests the abandoned small collectives only while the progress thread is
  // idle (the two never call MPI at once).
  bool quiet() override {
    return in_flight_.load(std::memory_order_acquire) == 0 && !inline_->abandoned_pending();
  }

  WorkHandle all_reduce_async(const void* send, void* recv, size_t count, DType type,
                              ReduceOp op) override {
    return submit(describe("all_reduce", count, type, reduce_op_name(op)),
                  [=, this] { all_reduce_now(send, recv, count, type, op); });
  }

  WorkHandle broadcast_async(void* buf, size_t count, DType type, int root) override {
    check_root(root);
    return submit(describe("broadcast", count, type, ("root " + std::to_string(root)).c_str()),
                  [=, this] { broadcast_now(buf, count, type, root); });
  }

  WorkHandle all_gather_async(const void* send, void* recv, size_t count, DType type) override {
    return submit(describe("all_gather", count, type, nullptr),
                  [=, this] { all_gather_now(send, recv, count, type); });
  }

  WorkHandle reduce_scatter_async(const void* send, void* recv, size_t count, DType type,
                                  ReduceOp op) override {
    return submit(describe("reduce_scatter", count, type, reduce_op_name(op)),
                  [=, this] { reduce_scatter_now(send, recv, count, type, op); });
  }

  WorkHandle barrier_async() override {
    return submit("barrier", [this] { inline_->barrier(Deadline::none()); });
  }

  // Blocking forms of small collectives: on the calling thread, once every collective issued
  // before has completed (so starting this one now keeps the issue order); mpi_inline.h.
  void all_reduce(const void* send, void* recv, size_t count, DType type, ReduceOp op) override {
    if (!small(count * dtype_size(type)))
      return Communicator::all_reduce(send, recv, count, type, op);
    const Deadline deadline = Deadline::after(timeout());
    drain(deadline, [&] { return describe("all_reduce", count, type, reduce_op_name(op)); });
    inline_->all_reduce(send, recv, count, type, op, deadline);
  }

  void broadcast(void* buf, size_t count, DType type, int root) override {
    check_root(root);
    if (!small(count * dtype_size(type))) return Communicator::broadcast(buf, count, type, root);
    const Deadline deadline = Deadline::after(timeout());
    drain(deadline, [&] {
      return describe("broadcast", count, type, ("root " + std::to_string(root)).c_str());
    });
    inline_->broadcast(buf, count, type, root, deadline);
  }

  void barrier() override {
    const Deadline deadline = Deadline::after(timeout());
    drain(deadline, [] { return std::string("barrier"); });
    inline_->barrier(deadline);
  }

 private:
  struct Task {
    std::function<void()> run;
    std::shared_ptr<WorkState> state;
  };

  // Whether a collective moving `bytes` is small (mpi_inline.h); the same answer on every rank.
  bool small(size_t bytes) const { return bytes <= kInlineMaxBytes && !options_.device_buffers; }

  // Waits until the progress thread has nothing queued or running, or throws TimeoutError naming
  // what() past the deadline.
  template <class Name>
  void drain(const Deadline& deadline, const Name& what) {
    if (!threaded_ || in_flight_.load(std::memory_order_acquire) == 0) return;
    std::unique_lock<std::mutex> lock(mutex_);
    if (idle_cv_.wait_until(lock, deadline.at, [&] { return in_flight_ == 0; })) return;
    stuck_ = true;
    throw missed_deadline(what(), deadline.timeout);
  }

  void check_root(int root) const {
    if (root < 0 || root >= size_)
      throw Error(rank_prefix() + " broadcast root " + std::to_string(root) +
                  " is not a rank of this world of " + std::to_string(size_));
  }

  WorkHandle submit(std::string what, std::function<void()> fn) {
    auto state = std::make_shared<WorkState>();
    auto on_timeout = [this] { stuck_ = true; };
    if (!threaded_) {
      execute(Task{std::move(fn), state});
      return std::make_unique<MpiWork>(state, std::move(what), on_timeout);
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back(Task{std::move(fn), state});
      ++in_flight_;
    }
    cv_.notify_one();
    return std::make_unique<MpiWork>(state, std::move(what), on_timeout);
  }

  static void execute(const Task& task, const std::function<void()>& after_run = {}) {
    std::string error;
    try {
      task.run();
    } catch (const std::exception& e) {
      error = e.what();
    }
    if (after_run) after_run();
    {
      std::lock_guard<std::mutex> lock(task.state->mutex);
      task.state->done = true;
      task.state->error = std::move(error);
    }
    task.state->cv.notify_all();
  }

  void run_worker() {
    nvtx_name_thread("mpi progress");
    for (;;) {
      Task task;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stop requested and nothing left to run
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      busy_ = true;
      // The task's MPI calls have returned: count it out of flight before its waiter wakes, so a
      // small collective issued right after the wait can already run inline.
      execute(task, [this] {
        std::lock_guard<std::mutex> lock(mutex_);
        if (--in_flight_ == 0) idle_cv_.notify_all();
      });
      busy_ = false;
    }
  }

  // Host staging of device buffers (MpiCommOptions::device_buffers), else the pointers as given.
  class Staged {
   public:
    Staged(bool device, const void* src, size_t bytes, bool copy_in) : device_(device) {
      if (!device_) {
        ptr_ = const_cast<void*>(src);
        return;
      }
      host_.resize(bytes);
      if (copy_in && bytes > 0) to_host(host_.data(), src, bytes);
      ptr_ = host_.data();
    }
    void* get() const { return ptr_; }
    void copy_out(void* device_dst, size_t bytes) const {
      if (device_ && bytes > 0) to_device(device_dst, host_.data(), bytes);
    }

   private:
    bool device_;
    std::vector<unsigned char> host_;
    void* ptr_ = nullptr;
  };

  void all_reduce_now(const void* send_dev, void* recv_dev, size_t count, DType type, ReduceOp op) {
    const size_t bytes = count * dtype_size(type);
    if (small(bytes))
      return inline_->all_reduce(send_dev, recv_dev, count, type, op, Deadline::none());
    TraceSpan span("mpi all_reduce", "collective", -1, static_cast<int64_t>(bytes));
    const bool dev = options_.device_buffers;
    Staged recv(dev, recv_dev, bytes, /*copy_in=*/send_dev == recv_dev);
    const void* send = send_dev;
    std::vector<unsigned char> send_host;
    if (send_dev == recv_dev) {
      send = recv.get();
    } else if (dev) {
      send_host.resize(bytes);
      if (bytes > 0) to_host(send_host.data(), send_dev, bytes);
      send = send_host.data();
    }
    if (type == DType::bf16 || type == DType::f16) {
      // Reduce as numbers: widen to float32, reduce, narrow once.
      std::vector<float> wide(count);
      half_to_float(type, static_cast<const uint16_t*>(send), wide.data(), count);
      reduce_chunks(MPI_IN_PLACE, wide.data(), count, MPI_FLOAT, mpi_op(op));
      if (op == ReduceOp::mean) divide<float>(wide.data(), count, size_);
      float_to_half(type, wide.data(), static_cast<uint16_t*>(recv.get()), count);
    } else {
      reduce_chunks(send == recv.get() ? MPI_IN_PLACE : send, recv.get(), count, mpi_type(type),
                    mpi_op(op));
      if (op == ReduceOp::mean) sum_to_mean(recv.get(), count, type, size_);
    }
    recv.copy_out(recv_dev, bytes);
  }

  void reduce_chunks(const void* send, void* recv, size_t count, MPI_Datatype t, MPI_Op op) {
    int es = 0;
    MPI_Type_size(t, &es);
    for (size_t off = 0; off < count || (count == 0 && off == 0); off += kMaxChunk) {
      int n = static_cast<int>(std::min(kMaxChunk, count - off));
      const void* s =
          send == MPI_IN_PLACE ? MPI_IN_PLACE : static_cast<const char*>(send) + off * es;
      LS_CHECK_MPI(MPI_Allreduce(s, static_cast<char*>(recv) + off * es, n, t, op, comm_));
      if (count == 0) break;
    }
  }

  void broadcast_now(void* buf_dev, size_t count, DType type, int root) {
    const size_t bytes = count * dtype_size(type);
    if (small(bytes)) return inline_->broadcast(buf_dev, count, type, root, Deadline::none());
    TraceSpan span("mpi broadcast", "collective", -1, static_cast<int64_t>(bytes));
    Staged buf(options_.device_buffers, buf_dev, bytes, /*copy_in=*/rank_ == root);
    MPI_Datatype t = mpi_type(type);
    int es = static_cast<int>(dtype_size(type));
    for (size_t off = 0; off < count || (count == 0 && off == 0); off += kMaxChunk) {
      int n = static_cast<int>(std::min(kMaxChunk, count - off));
      LS_CHECK_MPI(MPI_Bcast(static_cast<char*>(buf.get()) + off * es, n, t, root, comm_));
      if (count == 0) break;
    }
    if (rank_ != root) buf.copy_out(buf_dev, bytes);
  }

  void check_block(size_t count) const {
    if (count * static_cast<size_t>(size_) > static_cast<size_t>(INT_MAX))
      throw Error(rank_prefix() + " all_gather/reduce_scatter of " + std::to_string(count) +
                  " elements per rank exceeds what one MPI call can move; split the buffer");
  }

  void all_gather_now(const void* send_dev, void* recv_dev, size_t count, DType type) {
    check_block(count);
    const size_t block = count * dtype_size(type);
    TraceSpan span("mpi all_gather", "collective", -1, static_cast<int64_t>(block * size_));
    const bool dev = options_.device_buffers;
    Staged send(dev, send_dev, block, true);
    Staged recv(dev, recv_dev, block * size_, false);
    // Copy our own block first: in place (send == our block of recv) then needs no special case.
    if (block > 0) std::memmove(static_cast<char*>(recv.get()) + rank_ * block, send.get(), block);
    MPI_Datatype t = mpi_type(type);
    LS_CHECK_MPI(MPI_Allgather(MPI_IN_PLACE, 0, t, recv.get(), static_cast<int>(count), t, comm_));
    recv.copy_out(recv_dev, block * size_);
  }

  void reduce_scatter_now(const void* send_dev, void* recv_dev, size_t count, DType type,
                          ReduceOp op) {
    check_block(count);
    const size_t es = dtype_size(type);
    const size_t total = count * size_;
    TraceSpan span("mpi reduce_scatter", "collective", -1, static_cast<int64_t>(total * es));
    Staged send(options_.device_buffers, send_dev, total * es, true);
    std::vector<unsigned char> out(count * es);
    if (type == DType::bf16 || type == DType::f16) {
      std::vector<float> wide(total), part(count);
      half_to_float(type, static_cast<const uint16_t*>(send.get()), wide.data(), total);
      LS_CHECK_MPI(MPI_Reduce_scatter_block(wide.data(), part.data(), static_cast<int>(count),
                                            MPI_FLOAT, mpi_op(op), comm_));
      if (op == ReduceOp::mean) divide<float>(part.data(), count, size_);
      float_to_half(type, part.data(), reinterpret_cast<uint16_t*>(out.data()), count);
    } else {
      LS_CHECK_MPI(MPI_Reduce_scatter_block(send.get(), out.data(), static_cast<int>(count),
                                            mpi_type(type), mpi_op(op), comm_));
      if (op == ReduceOp::mean) sum_to_mean(out.data(), count, type, size_);
    }
    // The output may overlap the input (in place): it is written only now, from `out`.
    if (options_.device_buffers) {
      if (!out.empty()) to_device(recv_dev, out.data(), out.size());
    } else if (!out.empty()) {
      std::memcpy(recv_dev, out.data(), out.size());
    }
  }

  MpiCommOptions options_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  bool threaded_ = false;
  std::thread worker_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::condition_variable idle_cv_;  // in_flight_ dropped to 0
  std::deque<Task> queue_;
  // Tasks queued or running on the progress thread: changed under mutex_ (for idle_cv_), read
  // without it by drain(); it drops only after the task's MPI calls have returned.
  std::atomic<size_t> in_flight_{0};
  bool stop_ = false;
  std::unique_ptr<InlineCollectives> inline_;
  std::atomic<bool> stuck_{false};  // a wait gave up on a collective
  std::atomic<bool> busy_{false};   // the worker is inside a collective
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(const MpiCommOptions& options) {
  if (options.device_buffers && !cuda_built())
    throw UsageError(
        "the MPI backend was asked to stage device buffers, but this binary has no "
        "CUDA support");
  return std::make_unique<MpiCommunicator>(options);
}

}  // namespace lockstep
