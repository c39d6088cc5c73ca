#include "runtime/data/h5_writer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace lockstep {
namespace {

std::vector<hsize_t> to_hsize(const std::vector<int64_t>& v) {
  return std::vector<hsize_t>(v.begin(), v.end());
}

H5Id make_space(const std::vector<int64_t>& shape) {
  if (shape.empty()) return H5Id(LS_CHECK_HDF5(H5Screate(H5S_SCALAR)));
  std::vector<hsize_t> dims = to_hsize(shape);
  return H5Id(LS_CHECK_HDF5(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr)));
}

H5Id make_vlen_string_type() {
  H5Id t(LS_CHECK_HDF5(H5Tcopy(H5T_C_S1)));
  LS_CHECK_HDF5(H5Tset_size(t.get(), H5T_VARIABLE));
  LS_CHECK_HDF5(H5Tset_cset(t.get(), H5T_CSET_UTF8));
  return t;
}

// Opens attribute `name` for writing: an existing one is deleted first, so its type may change.
H5Id create_attr(hid_t obj, const std::string& name, hid_t type, hid_t space) {
  if (LS_CHECK_HDF5(H5Aexists(obj, name.c_str())) > 0) LS_CHECK_HDF5(H5Adelete(obj, name.c_str()));
  return H5Id(LS_CHECK_HDF5(H5Acreate2(obj, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT)));
}

H5Id open_attr(hid_t obj, const std::string& name) {
  if (LS_CHECK_HDF5(H5Aexists(obj, name.c_str())) <= 0) return H5Id();
  return H5Id(LS_CHECK_HDF5(H5Aopen(obj, name.c_str(), H5P_DEFAULT)));
}

int64_t attr_count(hid_t attr) {
  H5Id space(LS_CHECK_HDF5(H5Aget_space(attr)));
  return LS_CHECK_HDF5(H5Sget_simple_extent_npoints(space.get()));
}

std::string attr_label(hid_t obj, const std::string& name) {
  return h5_object_name(obj) + " attribute " + name;
}

std::vector<std::string> read_strings(hid_t obj, const std::string& name, hid_t attr) {
  H5Id type(LS_CHECK_HDF5(H5Aget_type(attr)));
  if (H5Tget_class(type.get()) != H5T_STRING)
    throw UsageError(attr_label(obj, name) + " is not a string");
  const auto n = static_cast<size_t>(attr_count(attr));
  std::vector<std::string> out;
  if (LS_CHECK_HDF5(H5Tis_variable_str(type.get())) > 0) {
    H5Id mem = make_vlen_string_type();
    std::vector<char*> ptrs(n, nullptr);
    LS_CHECK_HDF5(H5Aread(attr, mem.get(), ptrs.data()));
    for (char* p : ptrs) out.emplace_back(p != nullptr ? p : "");
    H5Id space(LS_CHECK_HDF5(H5Aget_space(attr)));
    LS_CHECK_HDF5(H5Dvlen_reclaim(mem.get(), space.get(), H5P_DEFAULT, ptrs.data()));
  } else {
    const size_t width = H5Tget_size(type.get());
    if (width == 0) throw UsageError(attr_label(obj, name) + " has a zero-width string type");
    std::vector<char> buf(n * width);
    LS_CHECK_HDF5(H5Aread(attr, type.get(), buf.data()));
    for (size_t i = 0; i < n; ++i) {
      const char* s = buf.data() + i * width;
      out.emplace_back(s, strnlen(s, width));
    }
  }
  return out;
}

std::vector<double> read_numbers(hid_t obj, const std::string& name, hid_t attr) {
  H5Id type(LS_CHECK_HDF5(H5Aget_type(attr)));
  H5T_class_t cls = H5Tget_class(type.get());
  if (cls != H5T_INTEGER && cls != H5T_FLOAT)
    throw UsageError(attr_label(obj, name) + " is not a number");
  std::vector<double> out(static_cast<size_t>(attr_count(attr)));
  if (!out.empty()) LS_CHECK_HDF5(H5Aread(attr, H5T_NATIVE_DOUBLE, out.data()));
  return out;
}

}  // namespace

hid_t h5_file_type(DType type) {
  switch (type) {
    case DType::f32: return H5T_IEEE_F32LE;
    case DType::f64: return H5T_IEEE_F64LE;
    case DType::u8: return H5T_STD_U8LE;
    case DType::i32: return H5T_STD_I32LE;
    case DType::i64: return H5T_STD_I64LE;
    default: break;
  }
  throw Error(std::string("HDF5 storage of ") + dtype_name(type) + " is not supported");
}

hid_t h5_memory_type(DType type) {
  switch (type) {
    case DType::f32: return H5T_NATIVE_FLOAT;
    case DType::f64: return H5T_NATIVE_DOUBLE;
    case DType::u8: return H5T_NATIVE_UINT8;
    case DType::i32: return H5T_NATIVE_INT32;
    case DType::i64: return H5T_NATIVE_INT64;
    default: break;
  }
  throw Error(std::string("HDF5 storage of ") + dtype_name(type) + " is not supported");
}

H5Id create_h5_file(const std::string& path) {
  Hdf5Lock lock;
  hid_t id = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (id < 0) throw UsageError(path + ": cannot create the file (" + hdf5_error_text() + ")");
  return H5Id(id);
}

void close_h5_file(H5Id& file, const std::string& path) {
  Hdf5Lock lock;
  const hid_t id = file.release();
  if (id < 0) throw Error("writing " + path + " failed: the file is not open");
  // HDF5's default (weak) close leaves the file open while an object in it is, so a write error
  // would surface later, at exit, where nobody checks it.
  const ssize_t objects = H5Fget_obj_count(
      id, H5F_OBJ_DATASET | H5F_OBJ_GROUP | H5F_OBJ_DATATYPE | H5F_OBJ_ATTR | H5F_OBJ_LOCAL);
  std::string reason;
  if (objects != 0)
    reason = objects < 0 ? hdf5_error_text()
                         : std::to_string(objects) + " HDF5 object(s) still open in it (a bug)";
  // Flush first so a failure names its cause; close anyway, to give the handle back.
  if (H5Fflush(id, H5F_SCOPE_LOCAL) < 0 && reason.empty()) reason = hdf5_system_error_text();
  if (H5Fclose(id) < 0 && reason.empty()) reason = hdf5_system_error_text();
  hdf5_error_text();  // a second failure adds nothing to the first
  if (!reason.empty()) throw Error("writing " + path + " failed: " + reason);
}

H5Id open_h5_readwrite(const std::string& path) {
  Hdf5Lock lock;
  open_h5_readonly(path);  // the same checks and messages for a missing or damaged file
  hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  if (id < 0) throw UsageError(path + ": " + h5_open_failure("cannot open for writing", true));
  return H5Id(id);
}

H5Id ensure_h5_group(hid_t loc, const std::string& path) {
  Hdf5Lock lock;
  if (path.empty() || path == "/") return H5Id(LS_CHECK_HDF5(H5Gopen2(loc, "/", H5P_DEFAULT)));
  // Walk the components so each existence test is direct (H5Lexists fails on a missing parent).
  H5Id current(LS_CHECK_HDF5(H5Gopen2(loc, ".", H5P_DEFAULT)));
  size_t pos = path[0] == '/' ? 1 : 0;
  while (pos < path.size()) {
    size_t end = std::min(path.find('/', pos), path.size());
    std::string part = path.substr(pos, end - pos);
    pos = end + 1;
    if (part.empty()) continue;
    hid_t next =
        h5_has_child(current.get(), part)
            ? H5Gopen2(current.get(), part.c_str(), H5P_DEFAULT)
            : H5Gcreate2(current.get(), part.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (next < 0)
      throw UsageError(h5_object_name(current.get()) + ": cannot open or create group " + part +
                       " (" + hdf5_error_text() + ")");
    current = H5Id(next);
  }
  return current;
}

std::string h5_file_name(hid_t obj) {
  Hdf5Lock lock;
  std::string file = "?";
  const ssize_t n = H5Fget_name(obj, nullptr, 0);
  if (n > 0) {
    file.assign(static_cast<size_t>(n) + 1, '\0');
    H5Fget_name(obj, file.data(), file.size());
    file.resize(static_cast<size_t>(n));
  }
  hdf5_error_text();  // a failed lookup leaves nothing worth keeping
  return file;
}

std::string h5_object_name(hid_t obj) {
  Hdf5Lock lock;
  std::string file = h5_file_name(obj), path = "?";
  ssize_t n = H5Iget_name(obj, nullptr, 0);
  if (n > 0) {
    path.assign(static_cast<size_t>(n) + 1, '\0');
    H5Iget_name(obj, path.data(), path.size());
    path.resize(static_cast<size_t>(n));
  }
  hdf5_error_text();  // a failed lookup above leaves nothing worth keeping
  return file + ":" + path;
}

std::vector<int64_t> row_chunk(const std::vector<int64_t>& shape, size_t element_size,
                               int64_t target_bytes) {
  std::vector<int64_t> chunk = shape;
  if (chunk.empty()) return chunk;
  int64_t row_bytes = static_cast<int64_t>(element_size);
  for (size_t i = 1; i < shape.size(); ++i) row_bytes *= std::max<int64_t>(shape[i], 1);
  chunk[0] = std::clamp<int64_t>(target_bytes / std::max<int64_t>(row_bytes, 1), 1,
                                 std::max<int64_t>(shape[0], 1));
  for (auto& c : chunk) c = std::max<int64_t>(c, 1);
  return chunk;
}

void write_h5_dataset(hid_t loc, const std::string& name, DType type,
                      const std::vector<int64_t>& shape, const void* data,
                      const H5WriteOptions& options) {
  Hdf5Lock lock;
  int64_t count = 1;
  for (int64_t d : shape) count *= d;
  H5Id space = make_space(shape);
  H5Id dcpl(LS_CHECK_HDF5(H5Pcreate(H5P_DATASET_CREATE)));
  // Chunked storage needs every dimension non-zero; an empty or scalar dataset stays contiguous.
  const bool can_chunk = !shape.empty() && count > 0;
  std::vector<int64_t> chunk = options.chunk;
  if (chunk.empty() && options.gzip_level > 0) chunk = row_chunk(shape, dtype_size(type));
  if (can_chunk && !chunk.empty()) {
    if (chunk.size() != shape.size())
      throw Error("write_h5_dataset " + name + ": chunk rank differs from the data's rank");
    for (size_t i = 0; i < chunk.size(); ++i) chunk[i] = std::clamp<int64_t>(chunk[i], 1, shape[i]);
    std::vector<hsize_t> cdims = to_hsize(chunk);
    LS_CHECK_HDF5(H5Pset_chunk(dcpl.get(), static_cast<int>(cdims.size()), cdims.data()));
    if (options.shuffle) LS_CHECK_HDF5(H5Pset_shuffle(dcpl.get()));
    if (options.gzip_level > 0)
      LS_CHECK_HDF5(
          H5Pset_deflate(dcpl.get(), static_cast<unsigned>(std::min(options.gzip_level, 9))));
  }
  H5Id lcpl(LS_CHECK_HDF5(H5Pcreate(H5P_LINK_CREATE)));
  LS_CHECK_HDF5(H5Pset_create_intermediate_group(lcpl.get(), 1));
  hid_t id = H5Dcreate2(loc, name.c_str(), h5_file_type(type), space.get(), lcpl.get(), dcpl.get(),
                        H5P_DEFAULT);
  if (id < 0)
    throw UsageError(h5_object_name(loc) + ": cannot create dataset " + name + " (" +
                     hdf5_error_text() + ")");
  H5Id dset(id);
  // The values go to the file here, so a full disk shows here first: the same message as
  // close_h5_file's.
  if (count > 0 &&
      H5Dwrite(dset.get(), h5_memory_type(type), H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0) {
    const std::string reason = hdf5_system_error_text();
    throw Error("writing " + h5_file_name(loc) + " failed: " + reason);
  }
}

std::vector<int64_t> h5_dataset_shape(hid_t loc, const std::string& name) {
  Hdf5Lock lock;
  hid_t id = H5Dopen2(loc, name.c_str(), H5P_DEFAULT);
  if (id < 0) {
    hdf5_error_text();
    throw UsageError(h5_object_name(loc) + ": no dataset " + name);
  }
  H5Id dset(id);
  H5Id space(LS_CHECK_HDF5(H5Dget_space(dset.get())));
  int rank = LS_CHECK_HDF5(H5Sget_simple_extent_ndims(space.get()));
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  if (rank > 0) LS_CHECK_HDF5(H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr));
  return std::vector<int64_t>(dims.begin(), dims.end());
}

void read_h5_dataset(hid_t loc, const std::string& name, DType type, void* out, size_t count) {
  Hdf5Lock lock;
  std::vector<int64_t> shape = h5_dataset_shape(loc, name);
  size_t have = 1;
  for (int64_t d : shape) have *= static_cast<size_t>(d);
  if (have != count)
    throw UsageError(h5_object_name(loc) + ": dataset " + name + " holds " + std::to_string(have) +
                     " values, expected " + std::to_string(count));
  if (count == 0) return;
  H5Id dset(LS_CHECK_HDF5(H5Dopen2(loc, name.c_str(), H5P_DEFAULT)));
  LS_CHECK_HDF5(H5Dread(dset.get(), h5_memory_type(type), H5S_ALL, H5S_ALL, H5P_DEFAULT, out));
}

void write_h5_attr_int(hid_t obj, const std::string& name, int64_t value) {
  Hdf5Lock lock;
  H5Id space = make_space({});
  H5Id attr = create_attr(obj, name, H5T_STD_I64LE, space.get());
  LS_CHECK_HDF5(H5Awrite(attr.get(), H5T_NATIVE_INT64, &value));
}

void write_h5_attr_double(hid_t obj, const std::string& name, double value) {
  Hdf5Lock lock;
  H5Id space = make_space({});
  H5Id attr = create_attr(obj, name, H5T_IEEE_F64LE, space.get());
  LS_CHECK_HDF5(H5Awrite(attr.get(), H5T_NATIVE_DOUBLE, &value));
}

void write_h5_attr_doubles(hid_t obj, const std::string& name, const std::vector<double>& values) {
  Hdf5Lock lock;
  H5Id space = make_space({static_cast<int64_t>(values.size())});
  H5Id attr = create_attr(obj, name, H5T_IEEE_F64LE, space.get());
  if (!values.empty()) LS_CHECK_HDF5(H5Awrite(attr.get(), H5T_NATIVE_DOUBLE, values.data()));
}

void write_h5_attr_string(hid_t obj, const std::string& name, const std::string& value) {
  Hdf5Lock lock;
  H5Id type = make_vlen_string_type();
  H5Id space = make_space({});
  H5Id attr = create_attr(obj, name, type.get(), space.get());
  const char* p = value.c_str();
  LS_CHECK_HDF5(H5Awrite(attr.get(), type.get(), &p));
}

void write_h5_attr_strings(hid_t obj, const std::string& name,
                           const std::vector<std::string>& values) {
  Hdf5Lock lock;
  H5Id type = make_vlen_string_type();
  H5Id space = make_space({static_cast<int64_t>(values.size())});
  H5Id attr = create_attr(obj, name, type.get(), space.get());
  std::vector<const char*> ptrs;
  for (const auto& v : values) ptrs.push_back(v.c_str());
  if (!ptrs.empty()) LS_CHECK_HDF5(H5Awrite(attr.get(), type.get(), ptrs.data()));
}

bool has_h5_attr(hid_t obj, const std::string& name) {
  Hdf5Lock lock;
  return LS_CHECK_HDF5(H5Aexists(obj, name.c_str())) > 0;
}

std::optional<std::vector<double>> read_h5_attr_doubles(hid_t obj, const std::string& name) {
  Hdf5Lock lock;
  H5Id attr = open_attr(obj, name);
  if (!attr.valid()) return std::nullopt;
  return read_numbers(obj, name, attr.get());
}

std::optional<double> read_h5_attr_double(hid_t obj, const std::string& name) {
  auto values = read_h5_attr_doubles(obj, name);
  if (!values) return std::nullopt;
  if (values->size() != 1)
    throw UsageError(attr_label(obj, name) + " holds " + std::to_string(values->size()) +
                     " values, expected one");
  return values->front();
}

std::optional<int64_t> read_h5_attr_int(hid_t obj, const std::string& name) {
  auto value = read_h5_attr_double(obj, name);
  if (!value) return std::nullopt;
  if (!(std::fabs(*value) < 9.2e18) || std::trunc(*value) != *value)
    throw UsageError(attr_label(obj, name) + " is " + std::to_string(*value) +
                     ", expected a whole number");
  return static_cast<int64_t>(*value);
}

std::optional<std::vector<std::string>> read_h5_attr_strings(hid_t obj, const std::string& name) {
  Hdf5Lock lock;
  H5Id attr = open_attr(obj, name);
  if (!attr.valid()) return std::nullopt;
  return read_strings(obj, name, attr.get());
}

std::optional<std::string> read_h5_attr_string(hid_t obj, const std::string& name) {
  auto values = read_h5_attr_strings(obj, name);
  if (!values) return std::nullopt;
  if (values->size() != 1)
    throw UsageError(attr_label(obj, name) + " holds " + std::to_string(values->size()) +
                     " strings, expected one");
  return values->front();
}

}  // namespace lockstep
