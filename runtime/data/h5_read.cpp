#include "runtime/data/h5_read.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <new>
#include <thread>

#if defined(LOCKSTEP_HAVE_LIBDEFLATE)
#include <libdeflate.h>
#else
#include <zlib.h>
#endif

#include "runtime/base/error.h"

namespace lockstep::h5_read {

namespace {

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

// The error for rows [first, last] of `what` that could not be read, and why.
SharedInputError rows_unreadable(const std::string& what, int64_t first, int64_t last,
                                 const std::string& why, const char* cause) {
  return SharedInputError(what + ": rows " + std::to_string(first) + " to " + std::to_string(last) +
                          " cannot be read (" + why + "): " + cause);
}
constexpr const char* kChanged = "the file was cut short or changed while training read it";

// What read_all_rows needs to know of a dataset it can decode.
struct ChunkPlan {
  int64_t rows = 0;        // the dataset's rows
  int64_t chunk_rows = 0;  // rows a chunk spans (each chunk spans whole rows)
  size_t row_bytes = 0;
  size_t elem_size = 0;
  bool gzip = false, shuffle = false;
};

// Under the Hdf5Lock: whether `dset` is chunked by whole rows, stored as mem_type, with no filters
// but gzip (deflate) and shuffle before it.
bool plan_chunks(hid_t dset, const std::vector<int64_t>& dims, hid_t mem_type, ChunkPlan& plan) {
  H5Id dcpl(H5Dget_create_plist(dset)), type(H5Dget_type(dset));
  if (!dcpl.valid() || !type.valid() || dims.empty() || dims[0] <= 0) return false;
  if (H5Pget_layout(dcpl.get()) != H5D_CHUNKED || H5Tequal(type.get(), mem_type) <= 0) return false;
  std::vector<hsize_t> chunk(dims.size());
  if (H5Pget_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data()) !=
      static_cast<int>(dims.size()))
    return false;
  plan.rows = dims[0];
  plan.chunk_rows = static_cast<int64_t>(chunk[0]);
  plan.elem_size = H5Tget_size(mem_type);
  plan.row_bytes = plan.elem_size;
  for (size_t d = 1; d < dims.size(); ++d) {
    if (static_cast<int64_t>(chunk[d]) != dims[d]) return false;
    plan.row_bytes *= static_cast<size_t>(dims[d]);
  }
  const int filters = H5Pget_nfilters(dcpl.get());
  if (filters < 0 || plan.chunk_rows <= 0 || plan.row_bytes == 0) return false;
  for (int f = 0; f < filters; ++f) {
    unsigned flags = 0, values[4] = {};
    size_t n_values = 4;
    const H5Z_filter_t id = H5Pget_filter2(dcpl.get(), static_cast<unsigned>(f), &flags, &n_values,
                                           values, 0, nullptr, nullptr);
    if (id == H5Z_FILTER_SHUFFLE && !plan.gzip && !plan.shuffle && n_values >= 1 &&
        values[0] == plan.elem_size)
      plan.shuffle = true;
    else if (id == H5Z_FILTER_DEFLATE && !plan.gzip)
      plan.gzip = true;
    else
      return false;
  }
  return true;
}

// One chunk as stored, and where its rows go.
struct StoredChunk {
  int64_t row0 = 0, rows = 0;
  std::vector<unsigned char> bytes;
};

// Decompresses zlib streams (HDF5's gzip filter writes them) into buffers of a known size.
class Inflater {
 public:
#if defined(LOCKSTEP_HAVE_LIBDEFLATE)
  Inflater() : d_(libdeflate_alloc_decompressor()) {
    if (d_ == nullptr) throw std::bad_alloc();
  }
  ~Inflater() { libdeflate_free_decompressor(d_); }
  // Whether [in, in + n) is a zlib stream of exactly `size` bytes, written to out.
  bool inflate(const unsigned char* in, size_t n, unsigned char* out, size_t size) {
    size_t got = 0;
    return libdeflate_zlib_decompress(d_, in, n, out, size, &got) == LIBDEFLATE_SUCCESS &&
           got == size;
  }

 private:
  libdeflate_decompressor* d_;
#else
  Inflater() = default;
  bool inflate(const unsigned char* in, size_t n, unsigned char* out, size_t size) {
    uLongf got = size;
    return uncompress(out, &got, in, n) == Z_OK && got == size;
  }
#endif
  Inflater(const Inflater&) = delete;
  Inflater& operator=(const Inflater&) = delete;
};

// One chunk's rows into out (the dataset's row 0): inflated, unshuffled (HDF5's shuffle stores
// byte b of every element, then byte b + 1, ...), and its edge rows beyond the dataset left out.
// False when it does not decompress to its size.
bool decode_chunk(const ChunkPlan& plan, const StoredChunk& c, Inflater& inflater,
                  std::vector<unsigned char>& scratch, unsigned char* out) {
  const size_t size = static_cast<size_t>(plan.chunk_rows) * plan.row_bytes;
  const size_t used = static_cast<size_t>(c.rows) * plan.row_bytes;
  unsigned char* dst = out + static_cast<size_t>(c.row0) * plan.row_bytes;
  const bool direct = c.rows == plan.chunk_rows && !(plan.shuffle && plan.elem_size > 1);
  const unsigned char* plain = c.bytes.data();
  if (plan.gzip) {
    unsigned char* to = direct ? dst : (scratch.resize(size), scratch.data());
    if (!inflater.inflate(c.bytes.data(), c.bytes.size(), to, size)) return false;
    if (direct) return true;
    plain = to;
  } else if (c.bytes.size() != size) {
    return false;
  }
  if (plan.shuffle && plan.elem_size > 1) {
    const size_t s = plan.elem_size, n = size / s, kept = used / s;
    for (size_t b = 0; b < s; ++b)
      for (size_t i = 0; i < kept; ++i) dst[i * s + b] = plain[b * n + i];
  } else if (plain != dst) {
    std::memcpy(dst, plain, used);
  }
  return true;
}

constexpr size_t kStoredBatchBytes = size_t{64} << 20;  // chunks read before they are decoded

}  // namespace

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
    case H5T_ENUM: {
      H5Id base(H5Tget_super(type));
      return base.valid() ? "enum of " + type_text(base.get()) : "enum";
    }
    default: return "non-numeric";
  }
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

std::optional<Elem> elem_of(hid_t type) {
  if (H5Tget_class(type) == H5T_ENUM) {
    // An enumeration's values are its base integer's (h5py's bool: FALSE 0 and TRUE 1 over
    // int8); HDF5 converts an enum to an integer or float type on reading.
    H5Id base(H5Tget_super(type));
    return base.valid() ? elem_of(base.get()) : std::nullopt;
  }
  const size_t size = H5Tget_size(type);
  if (H5Tget_class(type) == H5T_FLOAT) {
    if (size == 2) {  // IEEE half only (bfloat16's 8-bit exponent is not taken)
      size_t spos = 0, epos = 0, esize = 0, mpos = 0, msize = 0;
      if (H5Tget_fields(type, &spos, &epos, &esize, &mpos, &msize) < 0) return std::nullopt;
      if (esize == 5 && msize == 10) return Elem::f16;
      return std::nullopt;
    }
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

namespace {
// Little-endian IEEE half as an HDF5 type (HDF5 1.10 has no predefined one): made once, kept for
// the process, as HDF5's own predefined types are.
hid_t half_type() {
  static const hid_t type = [] {
    Hdf5Lock lock;
    const hid_t t = LS_CHECK_HDF5(H5Tcopy(H5T_IEEE_F32LE));
    LS_CHECK_HDF5(H5Tset_fields(t, 15, 10, 5, 0, 10));
    LS_CHECK_HDF5(H5Tset_size(t, 2));
    LS_CHECK_HDF5(H5Tset_ebias(t, 15));
    return t;
  }();
  return type;
}
}  // namespace

H5Id native_enum(hid_t type) {
  if (H5Tget_class(type) != H5T_ENUM) return H5Id();
  return H5Id(LS_CHECK_HDF5(H5Tget_native_type(type, H5T_DIR_ASCEND)));
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
    case Elem::f16: return half_type();
    case Elem::f32: return H5T_NATIVE_FLOAT;
    case Elem::f64: return H5T_NATIVE_DOUBLE;
  }
  return H5T_NATIVE_UINT8;
}

// Shuffled rows land in every chunk: a cache that keeps decompressed chunks stops a chunk being
// inflated again for each of its rows. HDF5 advises a prime number of hash slots, about 100 times
// the chunks that fit. The preemption weight stays below 1: at 1.0, HDF5 1.10 never evicts a
// partly read chunk and the cache grows past its size to the whole decompressed dataset.
int64_t chunk_bytes(hid_t dset) {
  H5Id dcpl(LS_CHECK_HDF5(H5Dget_create_plist(dset)));
  if (H5Pget_layout(dcpl.get()) != H5D_CHUNKED) return 0;
  hsize_t dims[H5S_MAX_RANK] = {};
  const int rank = LS_CHECK_HDF5(H5Pget_chunk(dcpl.get(), H5S_MAX_RANK, dims));
  H5Id type(LS_CHECK_HDF5(H5Dget_type(dset)));
  auto bytes = static_cast<int64_t>(H5Tget_size(type.get()));
  for (int i = 0; i < rank; ++i) bytes *= static_cast<int64_t>(dims[i]);
  return bytes;
}

H5Id chunk_cache_access(hid_t dset, int64_t cache_bytes) {
  const int64_t chunk = chunk_bytes(dset);
  int64_t slots = chunk > 0 ? std::clamp<int64_t>(100 * (cache_bytes / chunk), 521, 1 << 18) : 521;
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
      throw rows_unreadable(what, sorted[i], sorted[j - 1], hdf5_error_text(), kChanged);
    i = j;
  }
}

bool read_all_rows(hid_t dset, const std::vector<int64_t>& dims, hid_t mem_type, void* buf,
                   const std::string& what, int threads) {
  ChunkPlan plan;
  {
    Hdf5Lock lock;
    if (!plan_chunks(dset, dims, mem_type, plan)) return false;
  }
  auto* out = static_cast<unsigned char*>(buf);
  const int64_t chunks = (plan.rows + plan.chunk_rows - 1) / plan.chunk_rows;
  std::vector<hsize_t> offset(dims.size(), 0);
  for (int64_t k = 0; k < chunks;) {
    // A batch of chunks as stored, under the lock; a chunk HDF5 must read itself (never written:
    // its fill value; stored with a filter skipped) is read here by H5Dread.
    std::vector<StoredChunk> batch;
    size_t stored = 0;
    {
      Hdf5Lock lock;
      for (; k < chunks && stored < kStoredBatchBytes; ++k) {
        StoredChunk c;
        c.row0 = k * plan.chunk_rows;
        c.rows = std::min(plan.chunk_rows, plan.rows - c.row0);
        offset[0] = static_cast<hsize_t>(c.row0);
        hsize_t size = 0;
        uint32_t skipped = 0;
        if (H5Dget_chunk_storage_size(dset, offset.data(), &size) >= 0 && size > 0) {
          c.bytes.resize(size);
          // A chunk never written that an earlier read left in the chunk cache (filled with
          // the dataset's fill value) has a size but no address: H5Dread below reads it, and
          // fails as this would where the chunk is really unreadable.
          if (H5Dread_chunk(dset, H5P_DEFAULT, offset.data(), &skipped, c.bytes.data()) < 0) {
            hdf5_error_text();
            size = 0;
          }
        }
        if (size == 0 || skipped != 0) {
          std::vector<int64_t> ids(static_cast<size_t>(c.rows));
          for (size_t i = 0; i < ids.size(); ++i) ids[i] = c.row0 + static_cast<int64_t>(i);
          H5Id space(LS_CHECK_HDF5(H5Dget_space(dset)));
          read_runs(dset, space.get(), dims, ids, mem_type,
                    out + static_cast<size_t>(c.row0) * plan.row_bytes, what);
          continue;
        }
        stored += c.bytes.size();
        batch.push_back(std::move(c));
      }
    }
    // Decoded on the threads, without the lock.
    std::atomic<size_t> next{0};
    std::mutex failed_mu;
    const StoredChunk* failed = nullptr;  // the first chunk that does not decode
    std::exception_ptr error;
    auto decode = [&] {
      try {
        Inflater inflater;
        std::vector<unsigned char> scratch;
        for (size_t i; (i = next++) < batch.size();)
          if (!decode_chunk(plan, batch[i], inflater, scratch, out)) {
            std::lock_guard<std::mutex> lock(failed_mu);
            if (failed == nullptr || batch[i].row0 < failed->row0) failed = &batch[i];
          }
      } catch (...) {
        std::lock_guard<std::mutex> lock(failed_mu);
        if (!error) error = std::current_exception();
        next = batch.size();
      }
    };
    std::vector<std::thread> helpers;
    const size_t workers = std::min(static_cast<size_t>(std::max(threads, 1)), batch.size());
    for (size_t t = 1; t < workers; ++t) helpers.emplace_back(decode);
    decode();
    for (std::thread& t : helpers) t.join();
    if (error) std::rethrow_exception(error);
    if (failed != nullptr)
      throw rows_unreadable(
          what, failed->row0, failed->row0 + failed->rows - 1,
          "their chunk of " + std::to_string(failed->bytes.size()) + " bytes as stored does not " +
              (plan.gzip ? "decompress" : "come") + " to its " +
              std::to_string(static_cast<size_t>(plan.chunk_rows) * plan.row_bytes) + " bytes",
          "the file is damaged, or was cut short or changed while training read it");
  }
  return true;
}

}  // namespace lockstep::h5_read
