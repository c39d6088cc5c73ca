#include "runtime/data/dataset.h"

#include <algorithm>
#include <cstring>
#include <cmath>
#include <limits>
#include <optional>
#include <sstream>

#include "runtime/base/error.h"
#include "runtime/data/h5_filters.h"
#include "runtime/data/h5_writer.h"
#include "runtime/data/hdf5_util.h"

namespace lockstep {
namespace {

constexpr int64_t kLabelScanRows = int64_t{1} << 20;

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

std::string type_text(hid_t type) {
  const size_t bits = H5Tget_size(type) * 8;
  switch (H5Tget_class(type)) {
    case H5T_INTEGER:
      return (H5Tget_sign(type) == H5T_SGN_NONE ? "uint" : "int") + std::to_string(bits);
    case H5T_FLOAT: return "float" + std::to_string(bits);
    case H5T_STRING: return "string";
    case H5T_COMPOUND: return "compound";
    default: return "non-numeric";
  }
}

std::vector<std::string> child_names(hid_t group) {
  std::vector<std::string> names;
  H5G_info_t gi{};
  if (H5Gget_info(group, &gi) < 0) return names;
  for (hsize_t i = 0; i < gi.nlinks && i < 20; ++i) {
    char buf[256] = {};
    if (H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, buf, sizeof(buf),
                           H5P_DEFAULT) >= 0)
      names.emplace_back(buf);
  }
  return names;
}

std::string holds_text(hid_t group) {
  std::vector<std::string> names = child_names(group);
  hdf5_error_text();
  if (names.empty()) return "it is empty";
  std::string s = "it holds ";
  for (size_t i = 0; i < names.size(); ++i) s += (i ? ", " : "") + names[i];
  return s;
}

std::vector<int64_t> dims_of(hid_t dset) {
  H5Id space(LS_CHECK_HDF5(H5Dget_space(dset)));
  int rank = LS_CHECK_HDF5(H5Sget_simple_extent_ndims(space.get()));
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  if (rank > 0) LS_CHECK_HDF5(H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr));
  return std::vector<int64_t>(dims.begin(), dims.end());
}

// Stored element types the reader accepts: every integer and IEEE float width files use. Rows are
// read in the file's own type (HDF5 then converts nothing) and converted here: a converting
// H5Dread allocates and zeroes a 1 MiB conversion buffer on every call, which dominated the
// per-run reads below.
enum class Elem { u8, i8, u16, i16, u32, i32, u64, i64, f32, f64 };

std::optional<Elem> elem_of(hid_t type) {
  const size_t size = H5Tget_size(type);
  if (H5Tget_class(type) == H5T_FLOAT) {
    if (size == 4) return Elem::f32;
    if (size == 8) return Elem::f64;
    return std::nullopt;
  }
  if (H5Tget_class(type) != H5T_INTEGER) return std::nullopt;
  const bool is_signed = H5Tget_sign(type) != H5T_SGN_NONE;
  switch (size) {
    case 1: return is_signed ? Elem::i8 : Elem::u8;
    case 2: return is_signed ? Elem::i16 : Elem::u16;
    case 4: return is_signed ? Elem::i32 : Elem::u32;
    case 8: return is_signed ? Elem::i64 : Elem::u64;
    default: return std::nullopt;
  }
}

hid_t native_type(Elem e) {
  switch (e) {
    case Elem::u8: return H5T_NATIVE_UINT8;
    case Elem::i8: return H5T_NATIVE_INT8;
    case Elem::u16: return H5T_NATIVE_UINT16;
    case Elem::i16: return H5T_NATIVE_INT16;
    case Elem::u32: return H5T_NATIVE_UINT32;
    case Elem::i32: return H5T_NATIVE_INT32;
    case Elem::u64: return H5T_NATIVE_UINT64;
    case Elem::i64: return H5T_NATIVE_INT64;
    case Elem::f32: return H5T_NATIVE_FLOAT;
    case Elem::f64: return H5T_NATIVE_DOUBLE;
  }
  return H5T_NATIVE_UINT8;
}

template <class In, class Out>
void convert_as(const unsigned char* in, size_t n, Out* out) {
  for (size_t i = 0; i < n; ++i) {
    In v;
    std::memcpy(&v, in + i * sizeof(In), sizeof(In));
    out[i] = static_cast<Out>(v);
  }
}

// n stored elements of type e at `in` -> out[0, n).
template <class Out>
void convert(Elem e, const unsigned char* in, size_t n, Out* out) {
  switch (e) {
    case Elem::u8: return convert_as<uint8_t>(in, n, out);
    case Elem::i8: return convert_as<int8_t>(in, n, out);
    case Elem::u16: return convert_as<uint16_t>(in, n, out);
    case Elem::i16: return convert_as<int16_t>(in, n, out);
    case Elem::u32: return convert_as<uint32_t>(in, n, out);
    case Elem::i32: return convert_as<int32_t>(in, n, out);
    case Elem::u64: return convert_as<uint64_t>(in, n, out);
    case Elem::i64: return convert_as<int64_t>(in, n, out);
    case Elem::f32: return convert_as<float>(in, n, out);
    case Elem::f64: return convert_as<double>(in, n, out);
  }
}

// Every open handle of one split, plus what inspect_dataset reports about it.
struct Split {
  H5Id file, group, x, y;
  DatasetInfo info;
  std::vector<int64_t> x_dims, y_dims;
  size_t x_size = 0, y_size = 0;  // bytes per stored element
  Elem x_elem = Elem::u8, y_elem = Elem::u8;
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

// Shuffled rows land in every chunk: a cache that keeps decompressed chunks stops a chunk being
// inflated again for each of its rows. HDF5 advises a prime number of hash slots, about 100 times
// the chunks that fit. The preemption weight stays below 1: at 1.0, HDF5 1.10 never evicts a
// partly read chunk and the cache grows past its size to the whole decompressed dataset.
H5Id chunk_cache_access(hid_t dset, int64_t cache_bytes) {
  H5Id dcpl(LS_CHECK_HDF5(H5Dget_create_plist(dset)));
  int64_t chunk_bytes = 0;
  if (H5Pget_layout(dcpl.get()) == H5D_CHUNKED) {
    hsize_t dims[H5S_MAX_RANK] = {};
    const int rank = LS_CHECK_HDF5(H5Pget_chunk(dcpl.get(), H5S_MAX_RANK, dims));
    H5Id type(LS_CHECK_HDF5(H5Dget_type(dset)));
    chunk_bytes = static_cast<int64_t>(H5Tget_size(type.get()));
    for (int i = 0; i < rank; ++i) chunk_bytes *= static_cast<int64_t>(dims[i]);
  }
  int64_t slots =
      chunk_bytes > 0 ? std::clamp<int64_t>(100 * (cache_bytes / chunk_bytes), 521, 1 << 18) : 521;
  auto is_prime = [](int64_t v) {
    for (int64_t d = 2; d * d <= v; ++d)
      if (v % d == 0) return false;
    return true;
  };
  while (!is_prime(slots)) ++slots;
  H5Id dapl(LS_CHECK_HDF5(H5Pcreate(H5P_DATASET_ACCESS)));
  LS_CHECK_HDF5(H5Pset_chunk_cache(dapl.get(), static_cast<size_t>(slots),
                                   static_cast<size_t>(cache_bytes), 0.75));
  return dapl;
}

std::optional<double> find_attr(const Split& s, const char* name) {
  for (hid_t obj : {s.x.get(), s.group.get(), s.file.get()})
    if (auto v = read_h5_attr_double(obj, name)) return v;
  return std::nullopt;
}

// Reads rows `sorted` (ascending, distinct) of `dset` (shape `dims`) into `buf`, packed in that
// order. One H5Dread per run of consecutive rows, each a single regular hyperslab whose memory
// selection has the same shape: HDF5 1.10 then maps the selection onto chunks directly. One
// OR-combined selection in a single call was about 5x slower on chunked Fashion-MNIST, because
// HDF5 then walks the selection element by element to split it into chunks (lockstep-data bench).
// A failed read (a file cut short or changed while training reads it) is a SharedInputError naming
// `what` (file and dataset) and the rows.
void read_runs(hid_t dset, hid_t file_space, const std::vector<int64_t>& dims,
               const std::vector<int64_t>& sorted, hid_t mem_type, void* buf,
               const std::string& what) {
  std::vector<hsize_t> mem_dims(dims.begin(), dims.end());
  mem_dims[0] = sorted.size();
  H5Id mem(
      LS_CHECK_HDF5(H5Screate_simple(static_cast<int>(mem_dims.size()), mem_dims.data(), nullptr)));
  std::vector<hsize_t> start(dims.size(), 0), mem_start(dims.size(), 0), count = mem_dims;
  for (size_t i = 0; i < sorted.size();) {
    size_t j = i + 1;
    while (j < sorted.size() && sorted[j] == sorted[j - 1] + 1) ++j;
    start[0] = static_cast<hsize_t>(sorted[i]);
    mem_start[0] = static_cast<hsize_t>(i);
    count[0] = static_cast<hsize_t>(j - i);
    LS_CHECK_HDF5(H5Sselect_hyperslab(file_space, H5S_SELECT_SET, start.data(), nullptr,
                                      count.data(), nullptr));
    LS_CHECK_HDF5(H5Sselect_hyperslab(mem.get(), H5S_SELECT_SET, mem_start.data(), nullptr,
                                      count.data(), nullptr));
    if (H5Dread(dset, mem_type, mem.get(), file_space, H5P_DEFAULT, buf) < 0)
      throw SharedInputError(what + ": rows " + std::to_string(sorted[i]) + " to " +
                             std::to_string(sorted[j - 1]) + " cannot be read (" +
                             hdf5_error_text() +
                             "): the file was cut short or changed while training read it");
    i = j;
  }
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
        throw UsageError(what + "--loss cross-entropy needs labels 0 to num_classes-1 (use --loss "
                                "mse to train a regression on these values)");
      throw UsageError(what + "the num_classes attribute marks the file as classification: fix "
                              "the labels, or pass --loss mse to train a regression on them");
    }
    auto [mn, mx] = std::minmax_element(buf.begin(), buf.end());
    lo = std::min(lo, *mn);
    hi = std::max(hi, *mx);
  }
  auto whole = [](double v) { return std::to_string(static_cast<long long>(v)); };
  if (lo < 0) throw UsageError(labels + ": holds a negative label (" + whole(lo) + ")");
  if (declared) {
    if (!(*declared >= 1 && *declared <= 1e9) || std::trunc(*declared) != *declared)
      throw UsageError(info.path + ": attribute num_classes is " + std::to_string(*declared) +
                       ", expected a positive whole number");
    info.num_classes = static_cast<int>(*declared);
    if (hi >= info.num_classes)
      throw UsageError(labels + ": holds label " + whole(hi) + " but num_classes is " +
                       std::to_string(info.num_classes) + " (labels must be 0 to num_classes-1)");
  } else {
    if (hi >= 1e9)
      throw UsageError(labels + ": holds label " + whole(hi) + ", too large for a class id");
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
      throw UsageError(where(info, "tokens") + ": this split is a token split (inputs and "
                       "shifted targets both come from tokens), so --x-name and --y-name must "
                       "be tokens or left out, not '" + *name + "'");
  info.x_name = info.y_name = "tokens";
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
  if (T > INT32_MAX / 2) throw UsageError(xw + ": rows of " + std::to_string(T + 1) + " tokens, too long a sequence");
  const std::optional<double> seq_len = find_attr(s, "seq_len");
  if (seq_len && *seq_len != static_cast<double>(T))
    throw UsageError(xw + ": attribute seq_len is " + std::to_string(*seq_len) + " but rows hold " +
                     std::to_string(T + 1) + " tokens (seq_len + 1 expected)");
  std::optional<double> vocab = find_attr(s, "vocab_size");
  if (!vocab && s.x_elem != Elem::u8)
    throw UsageError(xw + ": " + info.x_type + " tokens need a vocab_size attribute (the number "
                     "of distinct token ids; only uint8 tokens default to 256)");
  if (vocab && (!(*vocab >= 1 && *vocab <= kMaxVocab) || std::trunc(*vocab) != *vocab))
    throw UsageError(xw + ": attribute vocab_size is " + std::to_string(*vocab) +
                     ", expected a whole number from 1 to 2^24");
  info.num_classes = static_cast<int>(vocab.value_or(256.0));
  info.classification = true;
  info.positions = static_cast<int>(T);
  info.sample_shape = {T};
  info.sample_size = T;
  if (!(s.x_elem == Elem::u8 && info.num_classes >= 256)) scan_tokens(s);
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
  info.y_name = spec.y_name;
  if (info.y_name.empty()) info.y_name = std::string(info.x_name == "images" ? "labels" : "y");

  s.x = open_dataset(s.group.get(), info, info.x_name, H5P_DEFAULT);
  s.y = open_dataset(s.group.get(), info, info.y_name, H5P_DEFAULT);
  // The chunk cache is set when a dataset is opened, and sizing its hash table needs the chunk
  // size: reopen x with a cache sized for its chunks.
  if (chunk_cache_bytes > 0) {
    H5Id dapl = chunk_cache_access(s.x.get(), chunk_cache_bytes);
    s.x.reset();
    s.x = open_dataset(s.group.get(), info, info.x_name, dapl.get());
  }

  const std::string xw = where(info, info.x_name), yw = where(info, info.y_name);
  require_h5_filters(s.x.get(), xw);
  require_h5_filters(s.y.get(), yw);
  H5Id xt(LS_CHECK_HDF5(H5Dget_type(s.x.get()))), yt(LS_CHECK_HDF5(H5Dget_type(s.y.get())));
  info.x_type = type_text(xt.get());
  info.y_type = type_text(yt.get());
  const std::optional<Elem> xe = elem_of(xt.get()), ye = elem_of(yt.get());
  if (!xe) throw UsageError(xw + ": has type " + info.x_type + ", expected integers or floats");
  if (!ye)
    throw UsageError(yw + ": has type " + info.y_type +
                     ", expected integer labels or float targets");
  s.x_elem = *xe;
  s.y_elem = *ye;
  s.x_size = H5Tget_size(xt.get());
  s.y_size = H5Tget_size(yt.get());

  s.x_dims = dims_of(s.x.get());
  s.y_dims = dims_of(s.y.get());
  // The label rule (dataset.h); one-hot rows (N, K > 1) stay regression targets.
  const std::optional<double> num_classes = find_attr(s, "num_classes");
  const bool one_per_row = s.y_dims.size() == 1 || (s.y_dims.size() == 2 && s.y_dims[1] == 1);
  info.classification = H5Tget_class(yt.get()) == H5T_INTEGER ||
                        spec.targets == TargetKind::labels ||
                        (spec.targets == TargetKind::automatic && num_classes && one_per_row);
  if (s.x_dims.empty()) throw UsageError(xw + ": is a scalar, expected one row per sample");
  if (s.y_dims.empty() || s.y_dims.size() > 2)
    throw UsageError(yw + ": has shape " + shape_text(s.y_dims) + ", expected (N,) or (N, K)");
  info.rows = s.x_dims[0];
  if (s.y_dims[0] != info.rows)
    throw UsageError(xw + " has " + std::to_string(info.rows) + " rows but " + info.y_name +
                     " has " + std::to_string(s.y_dims[0]) + "; they must match");
  if (info.rows == 0) throw UsageError(xw + ": is empty (0 rows)");
  info.sample_shape.assign(s.x_dims.begin() + 1, s.x_dims.end());
  if (info.sample_shape.empty()) info.sample_shape = {1};
  info.sample_size = 1;
  for (int64_t d : info.sample_shape) info.sample_size *= d;
  if (info.sample_size == 0)
    throw UsageError(xw + ": has empty samples, shape " + shape_text(s.x_dims));
  if (s.y_dims.size() == 2 && (s.y_dims[1] == 0 || (info.classification && s.y_dims[1] != 1)))
    throw UsageError(yw + ": has shape " + shape_text(s.y_dims) + ", expected " +
                     (info.classification ? "(N,) labels" : "(N,) or (N, K) targets with K > 0"));
  info.target_dim = s.y_dims.size() == 2 ? static_cast<int>(s.y_dims[1]) : 1;

  info.norm_scale = static_cast<float>(
      find_attr(s, "norm_scale").value_or(s.x_elem == Elem::u8 ? 1.0 / 255.0 : 1.0));
  info.norm_mean = static_cast<float>(find_attr(s, "norm_mean").value_or(0.0));
  info.norm_std = static_cast<float>(find_attr(s, "norm_std").value_or(1.0));
  if (!(info.norm_std > 0) || !std::isfinite(info.norm_std) || !std::isfinite(info.norm_mean) ||
      !std::isfinite(info.norm_scale))
    throw UsageError(
        info.path + ": normalisation attributes must be finite with norm_std > 0 (norm_mean " +
        std::to_string(info.norm_mean) + ", norm_std " + std::to_string(info.norm_std) + ")");
  if (info.classification) scan_labels(s, num_classes, spec.targets);
  return s;
}

}  // namespace

DatasetInfo inspect_dataset(const DatasetSpec& spec) {
  return open_split(spec, 0).info;
}

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

struct DatasetReader::Impl {
  Split s;
  H5Id x_space, y_space;
  float lut[256] = {};  // uint8 value -> normalised float
  float scale = 1, shift = 0;
  uint64_t bytes = 0;
  std::vector<int64_t> sorted;
  std::vector<unsigned char> x_raw, y_raw;  // rows as stored
  std::vector<int64_t> row_tokens;          // a token split: one row's T + 1 tokens

  void read_token_rows(const int64_t* ids, size_t n, float* x, int32_t* labels);
};

DatasetReader::DatasetReader(const DatasetSpec& spec, int64_t chunk_cache_bytes)
    : impl_(std::make_unique<Impl>()) {
  Hdf5Lock lock;
  impl_->s = open_split(spec, chunk_cache_bytes);
  impl_->x_space = H5Id(LS_CHECK_HDF5(H5Dget_space(impl_->s.x.get())));
  if (impl_->s.y.valid()) impl_->y_space = H5Id(LS_CHECK_HDF5(H5Dget_space(impl_->s.y.get())));
  const DatasetInfo& info = impl_->s.info;
  for (int v = 0; v < 256; ++v)
    impl_->lut[v] = (static_cast<float>(v) * info.norm_scale - info.norm_mean) / info.norm_std;
  impl_->scale = info.norm_scale / info.norm_std;
  impl_->shift = info.norm_mean / info.norm_std;
}

DatasetReader::~DatasetReader() {
  Hdf5Lock lock;
  impl_.reset();
}

const DatasetInfo& DatasetReader::info() const { return impl_->s.info; }

uint64_t DatasetReader::bytes_read() const { return impl_->bytes; }

// read_rows of a token split: inputs are the first T tokens of a row, as exact floats; labels the
// last T (each position's next token).
void DatasetReader::Impl::read_token_rows(const int64_t* ids, size_t n, float* x,
                                          int32_t* labels) {
  Impl& m = *this;
  const DatasetInfo& info = m.s.info;
  const size_t rows = m.sorted.size();
  const auto T = static_cast<size_t>(info.positions), cols = T + 1;
  {
    Hdf5Lock lock;
    m.x_raw.resize(rows * cols * m.s.x_size);
    read_runs(m.s.x.get(), m.x_space.get(), m.s.x_dims, m.sorted, native_type(m.s.x_elem),
              m.x_raw.data(), where(info, info.x_name));
  }
  m.bytes += rows * cols * m.s.x_size;
  m.row_tokens.resize(cols);
  int64_t* tok = m.row_tokens.data();
  for (size_t i = 0; i < n; ++i) {
    const auto j = static_cast<size_t>(
        std::lower_bound(m.sorted.begin(), m.sorted.end(), ids[i]) - m.sorted.begin());
    convert(m.s.x_elem, m.x_raw.data() + j * cols * m.s.x_size, cols, tok);
    for (size_t k = 0; k < cols; ++k)
      // The tokens were checked at open; a file changed underneath is caught here.
      if (tok[k] < 0 || tok[k] >= info.num_classes)
        throw SharedInputError(where(info, info.x_name) + ": token " + std::to_string(tok[k]) +
                               " at row " + std::to_string(ids[i]) + " is outside the vocabulary "
                               "[0, " + std::to_string(info.num_classes) +
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
  m.sorted.assign(ids, ids + n);
  std::sort(m.sorted.begin(), m.sorted.end());
  m.sorted.erase(std::unique(m.sorted.begin(), m.sorted.end()), m.sorted.end());
  if (m.sorted.front() < 0 || m.sorted.back() >= info.rows)
    throw Error("DatasetReader::read_rows: row outside [0, " + std::to_string(info.rows) + ")");
  if (!m.s.y.valid()) return m.read_token_rows(ids, n, x, labels);  // a token split
  const size_t rows = m.sorted.size();
  const auto sample = static_cast<size_t>(info.sample_size);
  const size_t ycols = info.classification ? 1 : static_cast<size_t>(info.target_dim);
  {
    Hdf5Lock lock;
    m.x_raw.resize(rows * sample * m.s.x_size);
    m.y_raw.resize(rows * ycols * m.s.y_size);
    read_runs(m.s.x.get(), m.x_space.get(), m.s.x_dims, m.sorted, native_type(m.s.x_elem),
              m.x_raw.data(), where(info, info.x_name));
    read_runs(m.s.y.get(), m.y_space.get(), m.s.y_dims, m.sorted, native_type(m.s.y_elem),
              m.y_raw.data(), where(info, info.y_name));
  }
  m.bytes += rows * (sample * m.s.x_size + ycols * m.s.y_size);

  for (size_t i = 0; i < n; ++i) {
    const auto j = static_cast<size_t>(
        std::lower_bound(m.sorted.begin(), m.sorted.end(), ids[i]) - m.sorted.begin());
    float* out = x + i * sample;
    if (m.s.x_elem == Elem::u8) {
      const uint8_t* in = m.x_raw.data() + j * sample;
      for (size_t k = 0; k < sample; ++k) out[k] = m.lut[in[k]];
    } else {
      convert(m.s.x_elem, m.x_raw.data() + j * sample * m.s.x_size, sample, out);
      for (size_t k = 0; k < sample; ++k) out[k] = out[k] * m.scale - m.shift;
    }
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
      convert(m.s.y_elem, y_in, ycols, targets + i * ycols);
    }
  }
}

}  // namespace lockstep
