#include "runtime/data/sharded_loader.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <exception>
#include <mutex>
#include <numeric>
#include <random>
#include <thread>

#include "runtime/base/error.h"
#include "runtime/comm/agree.h"
#include "runtime/data/h5_read.h"
#include "runtime/observe/nvtx.h"

namespace lockstep {
namespace {

constexpr size_t kSpareBatches = 4;

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Uniform in [0, n), unbiased: draws below 2^64 mod n are rejected, so the remaining range is a
// whole number of copies of [0, n). mt19937_64's output is fixed by the C++ standard and this
// draw is ours, so the sequence is the same with every compiler and standard library (unlike
// std::uniform_int_distribution and std::shuffle).
uint64_t uniform_below(std::mt19937_64& gen, uint64_t n) {
  const uint64_t threshold = (0 - n) % n;
  for (;;) {
    const uint64_t r = gen();
    if (r >= threshold) return r % n;
  }
}

}  // namespace

struct ShardedLoader::Impl {
  Impl(const DatasetSpec& spec, const LoaderOptions& o, int r, int p)
      : reader(spec, o.chunk_cache_bytes, o.in_memory_bytes), options(o), rank(r), size(p) {}

  DatasetReader reader;
  LoaderOptions options;
  int rank, size;
  int64_t local = 0, steps = 0;

  bool started = false;
  int epoch = 0;
  std::vector<int64_t> perm;
  int64_t consume_step = 0;
  double wait_total = 0;

  // Shared with the prefetch thread, under mu.
  std::thread worker;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Batch> ready;
  std::vector<Batch> spare;
  int64_t produce_step = 0;
  bool stop = false;
  std::exception_ptr error;
  uint64_t bytes = 0;

  void fill(Batch& b, int64_t step);
  void run();
  void stop_worker();
};

void ShardedLoader::Impl::fill(Batch& b, int64_t step) {
  const DatasetInfo& info = reader.info();
  const int64_t rows = info.rows, B = options.rows_per_step;
  const auto n = static_cast<size_t>(local);
  const auto sample = static_cast<size_t>(info.sample_size);
  b.epoch = epoch;
  b.step = step;
  b.rows = local;
  b.global_valid = std::min(B, rows - step * B);
  b.index.resize(n);
  b.mask.resize(n);
  const int64_t base = step * B + rank * local;
  int64_t valid = 0;
  for (size_t i = 0; i < n; ++i) {
    const int64_t pos = base + static_cast<int64_t>(i);
    const bool real = pos < rows;
    b.index[i] = real ? perm[static_cast<size_t>(pos)] : -1;
    b.mask[i] = real ? 1.0f : 0.0f;
    valid += real;
  }
  b.valid = valid;  // positions run upwards, so the real rows are a prefix of the slice
  b.x.assign(n * sample, 0.0f);
  if (info.classification) {
    b.labels.assign(n * static_cast<size_t>(info.positions), 0);
    b.targets.clear();
  } else {
    b.targets.assign(n * static_cast<size_t>(info.target_dim), 0.0f);
    b.labels.clear();
  }
  reader.read_rows(b.index.data(), static_cast<size_t>(valid), b.x.data(),
                   info.classification ? b.labels.data() : nullptr,
                   info.classification ? nullptr : b.targets.data());
}

void ShardedLoader::Impl::run() {
  nvtx_name_thread("prefetch");
  try {
    for (;;) {
      Batch b;
      int64_t step = 0;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] {
          return stop || produce_step >= steps ||
                 ready.size() < static_cast<size_t>(options.prefetch);
        });
        if (stop || produce_step >= steps) return;
        step = produce_step++;
        if (!spare.empty()) {
          b = std::move(spare.back());
          spare.pop_back();
        }
      }
      fill(b, step);
      {
        std::lock_guard<std::mutex> lock(mu);
        if (stop) return;
        ready.push_back(std::move(b));
        bytes = reader.bytes_read();
      }
      cv.notify_all();
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu);
    error = std::current_exception();
    cv.notify_all();
  }
}

void ShardedLoader::Impl::stop_worker() {
  {
    std::lock_guard<std::mutex> lock(mu);
    stop = true;
  }
  cv.notify_all();
  if (worker.joinable()) worker.join();
  std::lock_guard<std::mutex> lock(mu);
  while (!ready.empty()) {
    if (spare.size() < kSpareBatches) spare.push_back(std::move(ready.front()));
    ready.pop_front();
  }
  stop = false;
  error = nullptr;
}

ShardedLoader::ShardedLoader(const DatasetSpec& spec, const LoaderOptions& options, int rank,
                             int size) {
  const int64_t B = options.rows_per_step;
  if (size < 1 || rank < 0 || rank >= size)
    throw Error("ShardedLoader: rank " + std::to_string(rank) + " outside a world of " +
                std::to_string(size));
  if (std::string why = split_problem(B, size, "rows per step"); !why.empty())
    throw UsageError(why);
  if (options.prefetch < 0)
    throw UsageError("prefetch depth must be 0 or more, got " + std::to_string(options.prefetch));
  impl_ = std::make_unique<Impl>(spec, options, rank, size);
  const DatasetInfo& info = impl_->reader.info();
  impl_->local = B / size;
  if (options.drop_remainder && info.rows < B)
    throw UsageError(info.path + ": " + info.group + "/" + info.x_name + " has " +
                     std::to_string(info.rows) + " rows, fewer than the rows per step " +
                     std::to_string(B) + ": with remainder drop no step would run");
  impl_->steps = options.drop_remainder ? info.rows / B : (info.rows + B - 1) / B;
}

ShardedLoader::~ShardedLoader() {
  if (impl_) impl_->stop_worker();
}

const DatasetInfo& ShardedLoader::info() const { return impl_->reader.info(); }

int64_t ShardedLoader::steps_per_epoch() const { return impl_->steps; }

void ShardedLoader::start_epoch(int epoch, int64_t first_step) {
  Impl& m = *impl_;
  m.stop_worker();
  if (first_step < 0 || first_step > m.steps)
    throw UsageError("cannot start epoch " + std::to_string(epoch) + " at step " +
                     std::to_string(first_step) + ": an epoch has " + std::to_string(m.steps) +
                     " steps at this many rows per step");
  m.epoch = epoch;
  m.perm = permutation(m.reader.info().rows, m.options.seed, epoch, m.options.shuffle);
  m.consume_step = first_step;
  m.produce_step = first_step;
  m.started = true;
  if (m.options.prefetch > 0 && first_step < m.steps) m.worker = std::thread([&m] { m.run(); });
}

bool ShardedLoader::next(Batch& out) {
  Impl& m = *impl_;
  if (!m.started) throw Error("ShardedLoader::next called before start_epoch");
  if (m.consume_step >= m.steps) return false;
  const auto t0 = std::chrono::steady_clock::now();
  if (m.options.prefetch == 0) {
    m.fill(out, m.consume_step);
    m.bytes = m.reader.bytes_read();
  } else {
    std::unique_lock<std::mutex> lock(m.mu);
    m.cv.wait(lock, [&] { return !m.ready.empty() || m.error; });
    // Batches read before a failure are still handed out; the failure comes when they run out.
    if (m.ready.empty()) std::rethrow_exception(m.error);
    if (m.spare.size() < kSpareBatches) m.spare.push_back(std::move(out));
    out = std::move(m.ready.front());
    m.ready.pop_front();
    lock.unlock();
    m.cv.notify_all();
  }
  out.wait_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  m.wait_total += out.wait_seconds;
  ++m.consume_step;
  return true;
}

uint64_t ShardedLoader::bytes_read() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->bytes;
}

double ShardedLoader::wait_seconds_total() const { return impl_->wait_total; }

uint64_t ShardedLoader::held_bytes() const { return impl_->reader.held_bytes(); }

uint64_t ShardedLoader::fingerprint() {
  if (impl_->started) throw Error("ShardedLoader::fingerprint after start_epoch");
  return impl_->reader.fingerprint();
}

std::vector<int64_t> ShardedLoader::permutation(int64_t rows, uint64_t seed, int epoch,
                                                bool shuffle) {
  std::vector<int64_t> perm(static_cast<size_t>(std::max<int64_t>(rows, 0)));
  std::iota(perm.begin(), perm.end(), int64_t{0});
  if (!shuffle || rows < 2) return perm;
  std::mt19937_64 gen(splitmix64(seed ^ splitmix64(static_cast<uint64_t>(epoch))));
  for (int64_t i = rows - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(uniform_below(gen, static_cast<uint64_t>(i) + 1));
    std::swap(perm[static_cast<size_t>(i)], perm[static_cast<size_t>(j)]);
  }
  return perm;
}

std::unique_ptr<ShardedLoader> open_sharded_loader(const DatasetSpec& spec,
                                                   const LoaderOptions& options,
                                                   Communicator& comm) {
  std::unique_ptr<ShardedLoader> loader;
  std::string message;
  try {
    loader = std::make_unique<ShardedLoader>(spec, options, comm.rank(), comm.size());
  } catch (const UsageError& e) {
    message = e.what();
  }
  agree_or_throw(comm, loader != nullptr, message);
  require_same_split(comm, *loader);
  return loader;
}

namespace {

// require_same_split over either owner of a split's reader.
template <class Split>
void compare_splits(Communicator& comm, Split& split) {
  const DatasetInfo& info = split.info();
  std::string what = std::to_string(info.rows) + " rows of " +
                     h5_read::shape_text(info.sample_shape) + " " + info.x_type;
  if (info.has_targets)
    what += info.positions > 1    ? ", vocabulary " + std::to_string(info.num_classes)
            : info.classification ? ", " + std::to_string(info.num_classes) + " classes"
                                  : ", targets (" + std::to_string(info.target_dim) + ",)";
  const std::string where = info.path + " (" + info.group + ")";
  std::string problem;
  char hash[24] = "unread";
  try {
    std::snprintf(hash, sizeof hash, "%016llx",
                  static_cast<unsigned long long>(split.fingerprint()));
  } catch (const UsageError& e) {
    problem = e.what();  // a row that cannot be read; the broadcasts below still take place
  }
  // Rank 0's "where\nwhat\nhash" to every rank; each compares what and hash (the path may
  // differ: a copy on each node's disk).
  const std::string mine = where + '\n' + what + '\n' + hash;
  auto len = static_cast<int64_t>(mine.size());
  comm.broadcast(&len, 1, DType::i64, 0);
  std::string first = comm.rank() == 0 ? mine : std::string(static_cast<size_t>(len), '\0');
  comm.broadcast(first.data(), first.size(), DType::u8, 0);
  const size_t cut = first.find('\n'), hash_at = first.rfind('\n');
  const std::string where0 = first.substr(0, cut);
  const std::string what0 = first.substr(cut + 1, hash_at - cut - 1);
  if (problem.empty() && first.substr(cut) != mine.substr(mine.find('\n')))
    problem = "rank " + std::to_string(comm.rank()) + " reads " + where + ": " + what +
              (what == what0 ? ", as rank 0's " + where0 +
                                   " does, but other values (in its first, middle or last "
                                   "row, or its normalisation attributes)"
                             : ", but rank 0 reads " + where0 + ": " + what0) +
              ". Every rank must read the same data: is a node's copy of the file stale or "
              "incomplete?";
  agree_or_throw(comm, problem.empty(), problem);
}

}  // namespace

void require_same_split(Communicator& comm, ShardedLoader& loader) { compare_splits(comm, loader); }
void require_same_split(Communicator& comm, DatasetReader& reader) { compare_splits(comm, reader); }

std::string split_problem(int64_t rows, int size, const std::string& what) {
  if (rows <= 0) return what + " must be positive, not " + std::to_string(rows);
  if (rows < size)
    return what + " " + std::to_string(rows) + " is fewer than the " + std::to_string(size) +
           " ranks: every rank needs at least one row per step; " + suggest_batch_sizes(rows, size);
  if (rows % size != 0)
    return what + " " + std::to_string(rows) + " does not divide by the " + std::to_string(size) +
           " ranks; " + suggest_batch_sizes(rows, size);
  return "";
}

std::string suggest_batch_sizes(int64_t batch, int size) {
  const int64_t p = std::max(size, 1);
  const int64_t lower = batch / p * p;
  if (lower < p) return "try " + std::to_string(p);
  if (lower == batch) return "try " + std::to_string(batch);
  return "try " + std::to_string(lower) + " or " + std::to_string(lower + p);
}

}  // namespace lockstep
