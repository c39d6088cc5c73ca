// DatasetReader (dataset.h): chosen rows of an open split, converted for training. The split is
// opened and checked by dataset.cpp (dataset_split.h).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <sstream>
#include <thread>

#include "runtime/base/error.h"
#include "runtime/data/dataset.h"
#include "runtime/data/dataset_split.h"
#include "runtime/data/h5_read.h"
#include "runtime/data/h5_virtual.h"
#include "runtime/data/hdf5_util.h"

namespace lockstep {

using namespace dataset_detail;
using namespace h5_read;

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
// Rows `sorted` (ascending) of one dataset into buf, row_bytes each in that order: from its
// sources where it lays them end to end (row_sources), else through HDF5 (read_runs).
void read_sorted(hid_t dset, hid_t space, const std::vector<int64_t>& dims,
                 const std::vector<RowSource>& sources, const std::vector<int64_t>& sorted,
                 hid_t type, unsigned char* buf, size_t row_bytes, const std::string& what) {
  Hdf5Lock lock;
  if (sources.empty()) return read_runs(dset, space, dims, sorted, type, buf, what);
  std::vector<int64_t> part;
  size_t at = 0;
  for (const RowSource& r : sources) {
    const size_t begin = at;
    part.clear();
    for (; at < sorted.size() && sorted[at] < r.first + r.rows; ++at)
      part.push_back(sorted[at] - r.first + r.src_first);
    if (!part.empty())
      read_runs(r.dset.get(), r.space.get(), r.dims, part, type, buf + begin * row_bytes, r.what);
  }
}

// Every row of one dataset into buf, decompressing chunks on `threads` where the layout allows
// (read_all_rows), source by source where it lays its sources end to end; whether all were read.
bool read_whole(hid_t dset, const std::vector<int64_t>& dims, const std::vector<RowSource>& sources,
                hid_t type, unsigned char* buf, size_t row_bytes, const std::string& what,
                int threads) {
  if (sources.empty()) return read_all_rows(dset, dims, type, buf, what, threads);
  for (const RowSource& r : sources) {
    unsigned char* out = buf + static_cast<size_t>(r.first) * row_bytes;
    if (r.src_first == 0 && r.rows == r.dims[0] &&
        read_all_rows(r.dset.get(), r.dims, type, out, r.what, threads))
      continue;
    std::vector<int64_t> ids(static_cast<size_t>(r.rows));
    std::iota(ids.begin(), ids.end(), r.src_first);
    Hdf5Lock lock;
    read_runs(r.dset.get(), r.space.get(), r.dims, ids, type, out, r.what);
  }
  return true;
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
  std::vector<RowSource> x_src, y_src;      // a joined split's shards, read directly (row_sources)

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
  impl_->x_src =
      row_sources(impl_->s.x.get(), spec.path, chunk_cache_bytes, where(info, info.x_name));
  if (impl_->s.y.valid())
    impl_->y_src = row_sources(impl_->s.y.get(), spec.path, 0, where(info, info.y_name));
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

uint64_t DatasetReader::fingerprint() {
  Impl& m = *impl_;
  const DatasetInfo& info = m.s.info;
  std::string text = info.group + '\n' + info.x_name + '\n' + info.y_name + '\n' +
                     std::to_string(info.rows) + shape_text(info.sample_shape) + info.x_type +
                     info.y_type + std::to_string(info.num_classes) + ' ' +
                     std::to_string(info.target_dim) + ' ' + std::to_string(info.positions) + ' ';
  for (float v : {info.norm_scale, info.norm_mean, info.norm_std}) {
    char bits[sizeof v];
    std::memcpy(bits, &v, sizeof v);
    text.append(bits, sizeof bits);
  }
  std::vector<int64_t> rows = {0, info.rows / 2, info.rows - 1};
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  std::vector<unsigned char> x(rows.size() * m.x_row_bytes()), y(rows.size() * m.y_row_bytes());
  {
    Hdf5Lock lock;
    read_sorted(m.s.x.get(), m.x_space.get(), m.s.x_dims, m.x_src, rows,
                read_type(m.s.x_enum, m.s.x_elem), x.data(), m.x_row_bytes(),
                where(info, info.x_name));
    if (m.s.y.valid())
      read_sorted(m.s.y.get(), m.y_space.get(), m.s.y_dims, m.y_src, rows,
                  read_type(m.s.y_enum, m.s.y_elem), y.data(), m.y_row_bytes(),
                  where(info, info.y_name));
  }
  // FNV-1a, 64 bits: a fixed function of the bytes, the same on every rank and build.
  uint64_t h = 14695981039346656037ull;
  const auto mix = [&h](const unsigned char* p, size_t n) {
    for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  };
  mix(reinterpret_cast<const unsigned char*>(text.data()), text.size());
  mix(x.data(), x.size());
  mix(y.data(), y.size());
  return h;
}

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
    x_type = read_type(s.x_enum, s.x_elem);
    if (s.y.valid()) y_type = read_type(s.y_enum, s.y_elem);
  }
  // Held whole: the chunks decompressed on several threads where the layout allows.
  const int threads = std::clamp(static_cast<int>(std::thread::hardware_concurrency()), 1, 8);
  const bool x_read = whole && read_whole(s.x.get(), s.x_dims, x_src, x_type, x_raw.data(),
                                          x_row_bytes(), where(info, info.x_name), threads);
  const bool y_read =
      !s.y.valid() || (whole && read_whole(s.y.get(), s.y_dims, y_src, y_type, y_raw.data(),
                                           y_row_bytes(), where(info, info.y_name), threads));
  if (!x_read)
    read_sorted(s.x.get(), x_space.get(), s.x_dims, x_src, sorted, x_type, x_raw.data(),
                x_row_bytes(), where(info, info.x_name));
  if (!y_read)
    read_sorted(s.y.get(), y_space.get(), s.y_dims, y_src, sorted, y_type, y_raw.data(),
                y_row_bytes(), where(info, info.y_name));
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
