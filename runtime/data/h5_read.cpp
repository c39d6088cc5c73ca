#include "runtime/data/h5_read.h"

#include <algorithm>

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

}  // namespace lockstep::h5_read
