#include "runtime/data/dataset.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <sstream>

#include "runtime/base/error.h"
#include "runtime/data/dataset_split.h"
#include "runtime/data/h5_filters.h"
#include "runtime/data/h5_read.h"
#include "runtime/data/h5_sources.h"
#include "runtime/data/h5_virtual.h"
#include "runtime/data/h5_writer.h"
#include "runtime/data/hdf5_util.h"

namespace lockstep {

namespace dataset_detail {

std::string where(const DatasetInfo& info, const std::string& name) {
  std::string g = info.group == "/" ? "" : info.group + "/";
  return info.path + ": " + g + name;
}

}  // namespace dataset_detail

namespace {

using namespace dataset_detail;

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

// `sources`: check where the values come from (h5_sources.h); a reopen of a checked dataset (for
// its chunk cache) need not walk its chunk index again.
H5Id open_dataset(hid_t group, const DatasetInfo& info, const std::string& name, hid_t dapl,
                  bool sources = true) {
  if (!h5_has_child(group, name))
    throw UsageError(where(info, name) + ": no such dataset (" + holds_text(group) + ")");
  hid_t id = H5Dopen2(group, name.c_str(), dapl);
  if (id < 0) {
    hdf5_error_text();
    const std::string link = external_link_problem(group, name);
    throw UsageError(where(info, name) + ": " + (link.empty() ? "is not a dataset" : link));
  }
  H5Id dset(id);
  if (sources) {
    require_virtual_sources(dset.get(), info.path, where(info, name));
    require_external_files(dset.get(), info.path, where(info, name));
    require_written(dset.get(), where(info, name));
  }
  return dset;
}

// Opens the split's inputs, info.x_name, and checks their filters. The chunk cache is set when a
// dataset is opened, and sizing its hash table needs the chunk size: with chunk_cache_bytes > 0,
// x is opened again with a cache sized for its chunks (0: HDF5's default cache).
void open_inputs(Split& s, int64_t chunk_cache_bytes) {
  const DatasetInfo& info = s.info;
  s.x = open_dataset(s.group.get(), info, info.x_name, H5P_DEFAULT);
  if (chunk_cache_bytes > 0) {
    H5Id dapl = chunk_cache_access(s.x.get(), chunk_cache_bytes);
    s.x.reset();
    s.x = open_dataset(s.group.get(), info, info.x_name, dapl.get(), false);
  }
  require_h5_filters(s.x.get(), where(info, info.x_name));
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
  open_inputs(s, chunk_cache_bytes);
  const std::string xw = where(info, info.x_name);
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
  s.y_enum = native_enum(yt.get());
  s.y_size = H5Tget_size(yt.get());
  s.y_dims = dims_of(s.y.get());
  // The label rule (dataset.h); one-hot rows (N, K > 1) stay regression targets.
  // num_classes is looked for on the labels themselves first (where an h5py user puts it), then
  // where the other attributes are.
  std::optional<double> num_classes = read_h5_attr_double(s.y.get(), "num_classes");
  if (!num_classes) num_classes = find_attr(s, "num_classes");
  const bool one_per_row = s.y_dims.size() == 1 || (s.y_dims.size() == 2 && s.y_dims[1] == 1);
  info.classification = H5Tget_class(yt.get()) == H5T_INTEGER ||
                        H5Tget_class(yt.get()) == H5T_ENUM || spec.targets == TargetKind::labels ||
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

}  // namespace

namespace dataset_detail {

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
    if (const std::string link = external_link_problem(s.file.get(), info.group); !link.empty())
      throw UsageError(spec.path + ": group " + link);
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
  open_inputs(s, chunk_cache_bytes);

  const std::string xw = where(info, info.x_name);
  H5Id xt(LS_CHECK_HDF5(H5Dget_type(s.x.get())));
  info.x_type = type_text(xt.get());
  const std::optional<Elem> xe = elem_of(xt.get());
  if (!xe)
    throw UsageError(xw + ": has type " + info.x_type +
                     ", expected integers or floats (float16, float32, float64)");
  s.x_elem = *xe;
  s.x_enum = native_enum(xt.get());
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

  // uint8 inputs are pixel intensities by default; an enum's values (categories, a bool's 0 and
  // 1) are not, whatever its base type.
  const bool pixels = s.x_elem == Elem::u8 && !s.x_enum.valid();
  info.norm_scale =
      static_cast<float>(find_attr(s, "norm_scale").value_or(pixels ? 1.0 / 255.0 : 1.0));
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

}  // namespace dataset_detail

DatasetInfo inspect_dataset(const DatasetSpec& spec) {
  return dataset_detail::open_split(spec, 0).info;
}

void check_sample_shape(const DatasetInfo& info, const std::vector<int64_t>& model_input) {
  auto strip = [](std::vector<int64_t> s) {
    if (s.size() > 1 && s.back() == 1) s.pop_back();
    return s;
  };
  if (strip(info.sample_shape) == strip(model_input)) return;
  throw UsageError(dataset_detail::where(info, info.x_name) + ": holds samples of shape " +
                   shape_text(info.sample_shape) + " but the model expects input of shape " +
                   shape_text(model_input));
}

}  // namespace lockstep
