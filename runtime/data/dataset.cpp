#include "runtime/data/dataset.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <optional>
#include <sstream>
#include <thread>

#include "runtime/base/error.h"
#include "runtime/data/h5_filters.h"
#include "runtime/data/h5_read.h"
#include "runtime/data/h5_writer.h"
#include "runtime/data/hdf5_util.h"

namespace lockstep {
namespace {

// A number read from a file, for a message: a whole one without a fraction ("10", not
// "10.000000"; 2^63 and above too), others as printf's %g.
std::string number_text(double v) {
  if (std::trunc(v) == v && std::fabs(v) < 1e15) return std::to_string(static_cast<long long>(v));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

using namespace h5_read;

constexpr int64_t kLabelScanRows = int64_t{1} << 20;

// Every open handle of one split, plus what inspect_dataset reports about it.
struct Split {
  H5Id file, group, x, y;
  DatasetInfo info;
  std::vector<int64_t> x_dims, y_dims;
  size_t x_size = 0, y_size = 0;  // bytes per stored element
  Elem x_elem = Elem::u8, y_elem = Elem::u8;
  bool tokens = false;  // a token split: no y, targets come from x
};

std::string where(const DatasetInfo& info, const std::string& name) {
  std::string g = info.group == "/" ? "" : info.group + "/";
  return info.path + ": " + g + name;
}

H5Id open_dataset(hid_t group, const DatasetInfo& info, const std::string& name, hid_t dapl) {
  if (!h5_has_child(group, name))
    throw UsageError(where(info, name) + ": no such dataset (" + holds_text(group) + ")");
  hid_t id = H5Dopen2(group, name.c_str(), dapl);
  if (id < 0) {
    hdf5_error_text();
    throw UsageError(where(info, name) + ": is not a dataset");
  }
  return H5Id(id);
}

std::optional<double> find_attr(const Split& s, const char* name) {
  for (hid_t obj : {s.x.get(), s.group.get(), s.file.get()})
    if (auto v = read_h5_attr_double(obj, name)) return v;
  return std::nullopt;
}

// Reads every label once, in blocks (as doubles: integer and float labels alike): labels must be
// whole numbers in [0, num_classes) before training starts, and without a num_classes attribute
// the largest label decides the class count.
void scan_labels(Split& s, std::optional<double> declared, TargetKind targets) {
  DatasetInfo& info = s.info;
  const int64_t cols = s.y_dims.size() == 2 ? s.y_dims[1] : 1;
  H5Id space(LS_CHECK_HDF5(H5Dget_space(s.y.get())));
  std::vector<double> buf;
  double lo = std::numeric_limits<double>::max(), hi = std::numeric_limits<double>::lowest();
  const std::string labels = where(info, info.y_name);
  for (int64_t first = 0; first < info.rows; first += kLabelScanRows) {
    const int64_t n = std::min(kLabelScanRows, info.rows - first);
    std::vector<hsize_t> start(s.y_dims.size(), 0), count(s.y_dims.size(), 1);
    start[0] = static_cast<hsize_t>(first);
    count[0] = static_cast<hsize_t>(n);
    LS_CHECK_HDF5(H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, start.data(), nullptr,
                                      count.data(), nullptr));
    buf.resize(static_cast<size_t>(n * cols));
    hsize_t mem_n = buf.size();
    H5Id mem(LS_CHECK_HDF5(H5Screate_simple(1, &mem_n, nullptr)));
    LS_CHECK_HDF5(
        H5Dread(s.y.get(), H5T_NATIVE_DOUBLE, mem.get(), space.get(), H5P_DEFAULT, buf.data()));
    for (size_t i = 0; i < buf.size(); ++i) {
      if (std::trunc(buf[i]) == buf[i]) continue;  // false for NaN and Inf too
      std::ostringstream v;
      v << buf[i];
      const std::string what = labels + ": holds " + v.str() + " at row " +
                               std::to_string(first + static_cast<int64_t>(i)) +
                               ", not a whole-number class label; ";
      if (targets == TargetKind::labels)
        throw UsageError(what +
                         "--loss cross-entropy needs labels 0 to num_classes-1 (use --loss "
                         "mse to train a regression on these values)");
      throw UsageError(what +
                       "the num_classes attribute marks the file as classification: fix "
                       "the labels, or pass --loss mse to train a regression on them");
    }
    auto [mn, mx] = std::minmax_element(buf.begin(), buf.end());
    lo = std::min(lo, *mn);
    hi = std::max(hi, *mx);
  }
  if (lo < 0) throw UsageError(labels + ": holds a negative label (" + number_text(lo) + ")");
  if (declared) {
    if (!(*declared >= 1 && *declared <= 1e9) || std::trunc(*declared) != *declared)
      throw UsageError(info.path + ": attribute num_classes is " + number_text(*declared) +
                       ", expected a positive whole number");
    info.num_classes = static_cast<int>(*declared);
    if (hi >= info.num_classes)
      throw UsageError(labels + ": holds label " + number_text(hi) + " but num_classes is " +
                       std::to_string(info.num_classes) + " (labels must be 0 to num_classes-1)");
  } else {
    if (hi >= 1e9)
      throw UsageError(labels + ": holds label " + number_text(hi) + ", too large for a class id");
    info.num_classes = static_cast<int>(hi + 1);
  }
}

// Token ids must be whole numbers a float holds exactly (the model reads them as floats).
constexpr double kMaxVocab = double{1 << 24};

// Reads every token once, in blocks, before training: each must be in [0, vocab_size).
void scan_tokens(const Split& s) {
  const DatasetInfo& info = s.info;
  const int64_t cols = s.x_dims[1];
  const int64_t block = std::max<int64_t>(1, kLabelScanRows / cols);
  H5Id space(LS_CHECK_HDF5(H5Dget_space(s.x.get())));
  std::vector<int64_t> buf;
  for (int64_t first = 0; first < info.rows; first += block) {
    const int64_t n = std::min(block, info.rows - first);
    hsize_t start[2] = {static_cast<hsize_t>(first), 0};
    hsize_t count[2] = {static_cast<hsize_t>(n), static_cast<hsize_t>(cols)};
    LS_CHECK_HDF5(H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, start, nullptr, count, nullptr));
    H5Id mem(LS_CHECK_HDF5(H5Screate_simple(2, count, nullptr)));
    buf.resize(static_cast<size_t>(n * cols));
    LS_CHECK_HDF5(
        H5Dread(s.x.get(), H5T_NATIVE_INT64, mem.get(), space.get(), H5P_DEFAULT, buf.data()));
    for (size_t i = 0; i < buf.size(); ++i) {
      if (buf[i] >= 0 && buf[i] < info.num_classes) continue;
      const auto at = static_cast<int64_t>(i);
      throw UsageError(where(info, info.x_name) + ": holds token " + std::to_string(buf[i]) +
                       " at row " + std::to_string(first + at / cols) + ", column " +
                       std::to_string(at % cols) + ", outside the vocabulary [0, " +
                       std::to_string(info.num_classes) + ") of its vocab_size attribute");
    }
  }
}

// A token split (dataset.h): tokens (N, T + 1) of integer ids; inputs and targets both come from
// it, so --x-name and --y-name have nothing to choose.
void open_tokens(Split& s, const DatasetSpec& spec, int64_t chunk_cache_bytes) {
  DatasetInfo& info = s.info;
  for (const std::string* name : {&spec.x_name, &spec.y_name})
    if (!name->empty() && *name != "tokens")
      throw UsageError(where(info, "tokens") +
                       ": this split is a token split (inputs and "
                       "shifted targets both come from tokens), so --x-name and --y-name must "
                       "be tokens or left out, not '" +
                       *name + "'");
  info.x_name = info.y_name = "tokens";
  s.tokens = true;
  s.x = open_dataset(s.group.get(), info, info.x_name, H5P_DEFAULT);
  if (chunk_cache_bytes > 0) {
    H5Id dapl = chunk_cache_access(s.x.get(), chunk_cache_bytes);
    s.x.reset();
    s.x = open_dataset(s.group.get(), info, info.x_name, dapl.get());
  }
  const std::string xw = where(info, info.x_name);
  require_h5_filters(s.x.get(), xw);
  H5Id xt(LS_CHECK_HDF5(H5Dget_type(s.x.get())));
  info.x_type = info.y_type = type_text(xt.get());
  const std::optional<Elem> xe = elem_of(xt.get());
  if (!xe || H5Tget_class(xt.get()) != H5T_INTEGER)
    throw UsageError(xw + ": has type " + info.x_type + ", expected integer token ids");
  s.x_elem = s.y_elem = *xe;
  s.x_size = s.y_size = H5Tget_size(xt.get());
  s.x_dims = dims_of(s.x.get());
  if (s.x_dims.size() != 2 || s.x_dims[1] < 2)
    throw UsageError(xw + ": has shape " + shape_text(s.x_dims) +
                     ", expected (N, T + 1): rows of T input tokens and one more");
  info.rows = s.x_dims[0];
  if (info.rows == 0) throw UsageError(xw + ": is empty (0 rows)");
  const int64_t T = s.x_dims[1] - 1;
  if (T > INT32_MAX / 2)
    throw UsageError(xw + ": rows of " + std::to_string(T + 1) + " tokens, too long a sequence");
  const std::optional<double> seq_len = find_attr(s, "seq_len");
  if (seq_len && *seq_len != static_cast<double>(T))
    throw UsageError(xw + ": attribute seq_len is " + number_text(*seq_len) + " but rows hold " +
                     std::to_string(T + 1) + " tokens (seq_len + 1 expected)");
  std::optional<double> vocab = find_attr(s, "vocab_size");
  if (!vocab && s.x_elem != Elem::u8)
    throw UsageError(xw + ": " + info.x_type +
                     " tokens need a vocab_size attribute (the number "
                     "of distinct token ids; only uint8 tokens default to 256)");
  if (vocab && (!(*vocab >= 1 && *vocab <= kMaxVocab) || std::trunc(*vocab) != *vocab))
    throw UsageError(xw + ": attribute vocab_size is " + number_text(*vocab) +
                     ", expected a whole number from 1 to 2^24");
  info.num_classes = static_cast<int>(vocab.value_or(256.0));
  info.classification = true;
  info.positions = static_cast<int>(T);
  info.sample_shape = {T};
  info.sample_size = T;
  if (!(s.x_elem == Elem::u8 && info.num_classes >= 256)) scan_tokens(s);
}

// The targets of an inputs-and-targets split whose inputs open_split has opened: their dataset,
// type, shape against the inputs' rows, and the label rule (dataset.h).
void open_targets(Split& s, const DatasetSpec& spec) {
  DatasetInfo& info = s.info;
  // By default labels beside images and y beside x; beside inputs of another name, whichever of
  // labels and y the group holds (labels first).
  info.y_name = spec.y_name;
  if (info.y_name.empty())
    info.y_name = info.x_name == "images" ? "labels"
                  : info.x_name == "x"    ? "y"
                  : h5_has_child(s.group.get(), "labels") || !h5_has_child(s.group.get(), "y")
                      ? "labels"
                      : "y";
  s.y = open_dataset(s.group.get(), info, info.y_name, H5P_DEFAULT);
  const std::string xw = where(info, info.x_name), yw = where(info, info.y_name);
  require_h5_filters(s.y.get(), yw);
  H5Id yt(LS_CHECK_HDF5(H5Dget_type(s.y.get())));
  info.y_type = type_text(yt.get());
  const std::optional<Elem> ye = elem_of(yt.get());
  if (!ye)
    throw UsageError(yw + ": has type " + info.y_type +
                     ", expected integer labels or float targets");
  s.y_elem = *ye;
  s.y_size = H5Tget_size(yt.get());
  s.y_dims = dims_of(s.y.get());
  // The label rule (dataset.h); one-hot rows (N, K > 1) stay regression targets.
  // num_classes is looked for on the labels themselves first (where an h5py user puts it), then
  // where the other attributes are.
  std::optional<double> num_classes = read_h5_attr_double(s.y.get(), "num_classes");
  if (!num_classes) num_classes = find_attr(s, "num_classes");
  const bool one_per_row = s.y_dims.size() == 1 || (s.y_dims.size() == 2 && s.y_dims[1] == 1);
  info.classification = H5Tget_class(yt.get()) == H5T_INTEGER ||
                        spec.targets == TargetKind::labels ||
                        (spec.targets == TargetKind::automatic && num_classes && one_per_row);
  if (s.y_dims.empty() || s.y_dims.size() > 2)
    throw UsageError(yw + ": has shape " + shape_text(s.y_dims) + ", expected (N,) or (N, K)");
  if (s.y_dims[0] != info.rows)
    throw UsageError(xw + " has " + std::to_string(info.rows) + " rows but " + info.y_name +
                     " has " + std::to_string(s.y_dims[0]) + "; they must match");
  if (s.y_dims.size() == 2 && (s.y_dims[1] == 0 || (info.classification && s.y_dims[1] != 1)))
    throw UsageError(yw + ": has shape " + shape_text(s.y_dims) + ", expected " +
                     (info.classification ? "(N,) labels" : "(N,) or (N, K) targets with K > 0"));
  info.target_dim = s.y_dims.size() == 2 ? static_cast<int>(s.y_dims[1]) : 1;
  if (info.classification) scan_labels(s, num_classes, spec.targets);
}

Split open_split(const DatasetSpec& spec, int64_t chunk_cache_bytes) {
  Hdf5Lock lock;
  Split s;
  DatasetInfo& info = s.info;
  info.path = spec.path;
  info.group = spec.group.empty() ? std::string("/") : spec.group;
  // HDF5 reads small pieces of contiguous datasets through a 64 KiB sieve buffer: for shuffled
  // rows every row would then cost a 64 KiB read. Runs of rows are read as they are instead.
  H5Id fapl(LS_CHECK_HDF5(H5Pcreate(H5P_FILE_ACCESS)));
  LS_CHECK_HDF5(H5Pset_sieve_buf_size(fapl.get(), 0));
  s.file = open_h5_readonly(spec.path, fapl.get());
  hid_t g = H5Gopen2(s.file.get(), info.group.c_str(), H5P_DEFAULT);
  if (g < 0) {
    hdf5_error_text();
    H5Id root(LS_CHECK_HDF5(H5Gopen2(s.file.get(), "/", H5P_DEFAULT)));
    throw UsageError(spec.path + ": no group '" + info.group + "' (at the top level " +
                     holds_text(root.get()) + ")");
  }
  s.group = H5Id(g);

  if (spec.x_name == "tokens" || h5_has_child(s.group.get(), "tokens")) {
    open_tokens(s, spec, chunk_cache_bytes);
    return s;
  }
  info.x_name = spec.x_name;
  for (const std::string candidate : {"images", "x"})
    if (info.x_name.empty() && h5_has_child(s.group.get(), candidate)) info.x_name = candidate;
  if (info.x_name.empty())
    throw UsageError(where(info, "") + ": no dataset 'images' or 'x' (" +
                     holds_text(s.group.get()) + "; --x-name picks another)");
  s.x = open_dataset(s.group.get(), info, info.x_name, H5P_DEFAULT);
  // The chunk cache is set when a dataset is opened, and sizing its hash table needs the chunk
  // size: reopen x with a cache sized for its chunks.
  if (chunk_cache_bytes > 0) {
    H5Id dapl = chunk_cache_access(s.x.get(), chunk_cache_bytes);
    s.x.reset();
    s.x = open_dataset(s.group.get(), info, info.x_name, dapl.get());
  }

  const std::string xw = where(info, info.x_name);
  require_h5_filters(s.x.get(), xw);
  H5Id xt(LS_CHECK_HDF5(H5Dget_type(s.x.get())));
  info.x_type = type_text(xt.get());
  const std::optional<Elem> xe = elem_of(xt.get());
  if (!xe) throw UsageError(xw + ": has type " + info.x_type + ", expected integers or floats");
  s.x_elem = *xe;
  s.x_size = H5Tget_size(xt.get());
  s.x_dims = dims_of(s.x.get());
  if (s.x_dims.empty()) throw UsageError(xw + ": is a scalar, expected one row per sample");
  info.rows = s.x_dims[0];
  if (info.rows == 0) throw UsageError(xw + ": is empty (0 rows)");
  info.sample_shape.assign(s.x_dims.begin() + 1, s.x_dims.end());
  if (info.sample_shape.empty()) info.sample_shape = {1};
  info.sample_size = 1;
  for (int64_t d : info.sample_shape) info.sample_size *= d;
  if (info.sample_size == 0)
    throw UsageError(xw + ": has empty samples, shape " + shape_text(s.x_dims));

  info.norm_scale = static_cast<float>(
      find_attr(s, "norm_scale").value_or(s.x_elem == Elem::u8 ? 1.0 / 255.0 : 1.0));
  info.norm_mean = static_cast<float>(find_attr(s, "norm_mean").value_or(0.0));
  info.norm_std = static_cast<float>(find_attr(s, "norm_std").value_or(1.0));
  if (!(info.norm_std > 0) || !std::isfinite(info.norm_std) || !std::isfinite(info.norm_mean) ||
      !std::isfinite(info.norm_scale))
    throw UsageError(
        info.path + ": normalisation attributes must be finite with norm_std > 0 (norm_mean " +
        std::to_string(info.norm_mean) + ", norm_std " + std::to_string(info.norm_std) + ")");
  if (spec.inputs_only)
    info.has_targets = false;
  else
    open_targets(s, spec);
  return s;
}

}  // namespace

DatasetInfo inspect_dataset(const DatasetSpec& spec) { return open_split(spec, 0).info; }

void check_sample_shape(const DatasetInfo& info, const std::vector<int64_t>& model_input) {
  auto strip = [](std::vector<int64_t> s) {
    if (s.size() > 1 && s.back() == 1) s.pop_back();
    return s;
  };
  if (strip(info.sample_shape) == strip(model_input)) return;
  throw UsageError(where(info, info.x_name) + ": holds samples of shape " +
                   shape_text(info.sample_shape) + " but the model expects input of shape " +
                   shape_text(model_input));
}

namespace {
// v[k] = v[k] * scale - shift for k in [0, n), and whether a result is NaN or an infinity as a
// float32 (its exponent's bits all set): one pass that vectorises, beside the normalisation.
bool normalise(float* v, size_t n, float scale, float shift) {
  uint32_t bad = 0;
  for (size_t k = 0; k < n; ++k) {
    const float r = v[k] * scale - shift;
    v[k] = r;
    uint32_t bits = 0;
    std::memcpy(&bits, &r, sizeof(bits));
    bad |= static_cast<uint32_t>((~bits & 0x7f800000u) == 0);
  }
  return bad != 0;
}

// Throws for the first value of row `row`'s v[0, n) (read from dataset `name`) that is not finite.
[[noreturn]] void refuse_non_finite(const float* v, size_t n, const DatasetInfo& info,
                                    const std::string& name, int64_t row) {
  size_t at = 0;
  while (at + 1 < n && std::isfinite(v[at])) ++at;
  std::ostringstream value;
  value << v[at];
  throw UsageError(where(info, name) + ": row " + std::to_string(row) +
                   (n > 1 ? ", value " + std::to_string(at) : std::string()) + " is " +
                   value.str() +
                   " as a float32: inputs (after the file's normalisation) and regression "
                   "targets must be finite, or the loss and predictions turn NaN");
}
}  // namespace

struct DatasetReader::Impl {
  Split s;
  H5Id x_space, y_space;
  float lut[256] = {};  // uint8 value -> normalised float
  float scale = 1, shift = 0;
  uint64_t bytes = 0;
  uint64_t stored = 0;  // the split's bytes as stored
  bool whole = false;   // the split is held in memory: sorted is every row, read once
  bool loaded = false;
  bool allow_non_finite = false;            // DatasetSpec::allow_non_finite
  std::vector<int64_t> sorted;              // the rows x_raw and y_raw hold, ascending
  std::vector<unsigned char> x_raw, y_raw;  // rows as stored
  std::vector<int64_t> row_tokens;          // a token split: one row's T + 1 tokens

  size_t x_row_bytes() const { return row_elems(s.x_dims) * s.x_size; }
  size_t y_row_bytes() const { return s.y.valid() ? row_elems(s.y_dims) * s.y_size : 0; }
  static size_t row_elems(const std::vector<int64_t>& dims) {
    size_t e = 1;
    for (size_t d = 1; d < dims.size(); ++d) e *= static_cast<size_t>(dims[d]);
    return e;
  }
  // Makes x_raw and y_raw hold rows ids[0, n) (and, held whole, every row).
  void fetch(const int64_t* ids, size_t n);
  // Where row id sits in x_raw and y_raw.
  size_t slot_of(int64_t id) const {
    if (whole) return static_cast<size_t>(id);
    return static_cast<size_t>(std::lower_bound(sorted.begin(), sorted.end(), id) - sorted.begin());
  }
  void token_rows(const int64_t* ids, size_t n, float* x, int32_t* labels);
};

DatasetReader::DatasetReader(const DatasetSpec& spec, int64_t chunk_cache_bytes,
                             int64_t in_memory_bytes)
    : impl_(std::make_unique<Impl>()) {
  Hdf5Lock lock;
  impl_->s = open_split(spec, chunk_cache_bytes);
  impl_->allow_non_finite = spec.allow_non_finite;
  impl_->x_space = H5Id(LS_CHECK_HDF5(H5Dget_space(impl_->s.x.get())));
  if (impl_->s.y.valid()) impl_->y_space = H5Id(LS_CHECK_HDF5(H5Dget_space(impl_->s.y.get())));
  const DatasetInfo& info = impl_->s.info;
  for (int v = 0; v < 256; ++v)
    impl_->lut[v] = (static_cast<float>(v) * info.norm_scale - info.norm_mean) / info.norm_std;
  impl_->scale = info.norm_scale / info.norm_std;
  impl_->shift = info.norm_mean / info.norm_std;
  impl_->stored = static_cast<uint64_t>(info.rows) * (impl_->x_row_bytes() + impl_->y_row_bytes());
  impl_->whole = in_memory_bytes > 0 && impl_->stored <= static_cast<uint64_t>(in_memory_bytes);
}

DatasetReader::~DatasetReader() {
  Hdf5Lock lock;
  impl_.reset();
}

const DatasetInfo& DatasetReader::info() const { return impl_->s.info; }

uint64_t DatasetReader::bytes_read() const { return impl_->bytes; }

uint64_t DatasetReader::held_bytes() const { return impl_->whole ? impl_->stored : 0; }

void DatasetReader::Impl::fetch(const int64_t* ids, size_t n) {
  if (whole && loaded) return;
  const DatasetInfo& info = s.info;
  if (whole) {
    sorted.resize(static_cast<size_t>(info.rows));
    std::iota(sorted.begin(), sorted.end(), int64_t{0});
  } else {
    sorted.assign(ids, ids + n);
    std::sort(sorted.begin(), sorted.end());
    sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  }
  const size_t rows = sorted.size();
  x_raw.resize(rows * x_row_bytes());
  y_raw.resize(rows * y_row_bytes());
  hid_t x_type = 0, y_type = 0;
  {
    Hdf5Lock lock;
    x_type = native_type(s.x_elem);
    if (s.y.valid()) y_type = native_type(s.y_elem);
  }
  // Held whole: the chunks decompressed on several threads where the layout allows.
  const int threads = std::clamp(static_cast<int>(std::thread::hardware_concurrency()), 1, 8);
  const bool x_read = whole && read_all_rows(s.x.get(), s.x_dims, x_type, x_raw.data(),
                                             where(info, info.x_name), threads);
  const bool y_read =
      !s.y.valid() || (whole && read_all_rows(s.y.get(), s.y_dims, y_type, y_raw.data(),
                                              where(info, info.y_name), threads));
  if (!x_read || !y_read) {
    Hdf5Lock lock;
    if (!x_read)
      read_runs(s.x.get(), x_space.get(), s.x_dims, sorted, x_type, x_raw.data(),
                where(info, info.x_name));
    if (!y_read)
      read_runs(s.y.get(), y_space.get(), s.y_dims, sorted, y_type, y_raw.data(),
                where(info, info.y_name));
  }
  bytes += rows * (x_row_bytes() + y_row_bytes());
  loaded = true;
}

// A token split: inputs are the first T tokens of a row, as exact floats; labels the last T
// (each position's next token).
void DatasetReader::Impl::token_rows(const int64_t* ids, size_t n, float* x, int32_t* labels) {
  const DatasetInfo& info = s.info;
  const auto T = static_cast<size_t>(info.positions), cols = T + 1;
  row_tokens.resize(cols);
  int64_t* tok = row_tokens.data();
  for (size_t i = 0; i < n; ++i) {
    convert(s.x_elem, x_raw.data() + slot_of(ids[i]) * cols * s.x_size, cols, tok);
    for (size_t k = 0; k < cols; ++k)
      // The tokens were checked at open; a file changed underneath is caught here.
      if (tok[k] < 0 || tok[k] >= info.num_classes)
        throw SharedInputError(where(info, info.x_name) + ": token " + std::to_string(tok[k]) +
                               " at row " + std::to_string(ids[i]) +
                               " is outside the vocabulary "
                               "[0, " +
                               std::to_string(info.num_classes) +
                               "): the file was changed while training read it");
    for (size_t k = 0; k < T; ++k) x[i * T + k] = static_cast<float>(tok[k]);
    if (labels != nullptr)
      for (size_t k = 0; k < T; ++k) labels[i * T + k] = static_cast<int32_t>(tok[k + 1]);
  }
}

void DatasetReader::read_rows(const int64_t* ids, size_t n, float* x, int32_t* labels,
                              float* targets) {
  if (n == 0) return;
  Impl& m = *impl_;
  const DatasetInfo& info = m.s.info;
  const auto [lo, hi] = std::minmax_element(ids, ids + n);
  if (*lo < 0 || *hi >= info.rows)
    throw Error("DatasetReader::read_rows: row outside [0, " + std::to_string(info.rows) + ")");
  m.fetch(ids, n);
  if (m.s.tokens) return m.token_rows(ids, n, x, labels);
  const auto sample = static_cast<size_t>(info.sample_size);
  const size_t ycols = info.classification ? 1 : static_cast<size_t>(info.target_dim);
  for (size_t i = 0; i < n; ++i) {
    const size_t j = m.slot_of(ids[i]);
    float* out = x + i * sample;
    if (m.s.x_elem == Elem::u8) {
      const uint8_t* in = m.x_raw.data() + j * sample;
      for (size_t k = 0; k < sample; ++k) out[k] = m.lut[in[k]];
    } else {
      convert(m.s.x_elem, m.x_raw.data() + j * sample * m.s.x_size, sample, out);
      if (normalise(out, sample, m.scale, m.shift) && !m.allow_non_finite)
        refuse_non_finite(out, sample, info, info.x_name, ids[i]);
    }
    if (!m.s.y.valid()) continue;
    const unsigned char* y_in = m.y_raw.data() + j * ycols * m.s.y_size;
    if (info.classification && labels != nullptr) {
      int64_t label = 0;
      convert(m.s.y_elem, y_in, 1, &label);
      // The labels were checked at open; a file changed underneath is caught here.
      if (label < 0 || label >= info.num_classes)
        throw Error(where(info, info.y_name) + ": label " + std::to_string(label) + " at row " +
                    std::to_string(ids[i]) + " is outside [0, " + std::to_string(info.num_classes) +
                    ")");
      labels[i] = static_cast<int32_t>(label);
    } else if (!info.classification && targets != nullptr) {
      float* t = targets + i * ycols;
      convert(m.s.y_elem, y_in, ycols, t);
      if (normalise(t, ycols, 1.0f, 0.0f) && !m.allow_non_finite)
        refuse_non_finite(t, ycols, info, info.y_name, ids[i]);
    }
  }
}

}  // namespace lockstep
