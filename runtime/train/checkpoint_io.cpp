#include "runtime/train/checkpoint_io.h"

#include <zlib.h>

#include <cmath>
#include <cstring>
#include <sstream>

#include "runtime/base/error.h"
#include "runtime/data/hdf5_util.h"

namespace lockstep::detail {
namespace {

constexpr const char* kFormatName = "lockstep-checkpoint";
// A tensor claiming more values than this is damage, not a model: refuse before allocating.
constexpr uint64_t kMaxTensorValues = uint64_t{1} << 33;

uint32_t crc_of(const void* data, size_t bytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  const auto* p = static_cast<const Bytef*>(data);
  // zlib takes uInt lengths: feed large buffers in pieces.
  while (bytes > 0) {
    uInt n = bytes > (1u << 30) ? (1u << 30) : static_cast<uInt>(bytes);
    crc = crc32(crc, p, n);
    p += n;
    bytes -= n;
  }
  return static_cast<uint32_t>(crc);
}

// ---- writing (failures are Errors: the file system refused) ----

H5Id string_type(size_t length) {
  H5Id type(LS_CHECK_HDF5(H5Tcopy(H5T_C_S1)));
  LS_CHECK_HDF5(H5Tset_size(type.get(), length > 0 ? length : 1));
  LS_CHECK_HDF5(H5Tset_strpad(type.get(), H5T_STR_NULLPAD));
  return type;
}

void put_attr(hid_t loc, const char* name, hid_t file_type, hid_t mem_type, const void* value) {
  H5Id space(LS_CHECK_HDF5(H5Screate(H5S_SCALAR)));
  H5Id attr(LS_CHECK_HDF5(H5Acreate2(loc, name, file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT)));
  LS_CHECK_HDF5(H5Awrite(attr.get(), mem_type, value));
}

void put_string(hid_t loc, const char* name, const std::string& text) {
  H5Id type = string_type(text.size());
  std::string padded = text.empty() ? std::string(1, '\0') : text;
  put_attr(loc, name, type.get(), type.get(), padded.data());
}

void put_i64(hid_t loc, const char* name, int64_t v) {
  put_attr(loc, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &v);
}

void put_u64(hid_t loc, const char* name, uint64_t v) {
  put_attr(loc, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, &v);
}

void put_dataset(hid_t loc, const std::string& name, const std::vector<hsize_t>& dims,
                 hid_t file_type, hid_t mem_type, const void* data, size_t bytes) {
  H5Id lcpl(LS_CHECK_HDF5(H5Pcreate(H5P_LINK_CREATE)));
  LS_CHECK_HDF5(H5Pset_create_intermediate_group(lcpl.get(), 1));
  H5Id space(LS_CHECK_HDF5(
      dims.empty() ? H5Screate(H5S_SCALAR)
                   : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr)));
  H5Id dset(LS_CHECK_HDF5(
      H5Dcreate2(loc, name.c_str(), file_type, space.get(), lcpl.get(), H5P_DEFAULT, H5P_DEFAULT)));
  if (bytes > 0) LS_CHECK_HDF5(H5Dwrite(dset.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data));
  uint32_t crc = crc_of(data, bytes);
  put_attr(dset.get(), "crc32", H5T_STD_U32LE, H5T_NATIVE_UINT32, &crc);
}

void put_tensors(hid_t file, const char* group_name, const std::vector<NamedTensor>& tensors) {
  H5Id group(LS_CHECK_HDF5(H5Gcreate2(file, group_name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
  std::string names;
  for (const NamedTensor& t : tensors) {
    std::vector<hsize_t> dims(t.shape.begin(), t.shape.end());
    put_dataset(group.get(), t.name, dims, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, t.data.data(),
                t.data.size() * sizeof(float));
    names += t.name + "\n";
  }
  put_string(group.get(), "names", names);
}

// ---- reading (failures are UsageErrors: the file is what is wrong) ----

class Reader {
 public:
  explicit Reader(std::string path) : path_(std::move(path)) {}

  [[noreturn]] void fail(const std::string& what) const {
    std::string reason = hdf5_error_text();
    std::string text = "checkpoint " + path_ + " cannot be used: " + what;
    if (!reason.empty()) text += " (HDF5: " + reason + ")";
    throw UsageError(text);
  }

  template <class T>
  T check(T value, const std::string& what) const {
    if (value < 0) fail(what);
    return value;
  }

  H5Id open_attr(hid_t loc, const std::string& where, const char* name) const {
    htri_t exists = H5Aexists(loc, name);
    if (exists <= 0) fail("attribute '" + std::string(name) + "' is missing from " + where);
    return H5Id(
        check(H5Aopen(loc, name, H5P_DEFAULT), "attribute " + where + name + " unreadable"));
  }

  std::string get_string(hid_t loc, const std::string& where, const char* name) const {
    H5Id attr = open_attr(loc, where, name);
    std::string what = "attribute " + where + name;
    H5Id type(check(H5Aget_type(attr.get()), what + " unreadable"));
    if (H5Tget_class(type.get()) != H5T_STRING) fail(what + " is not a string");
    if (H5Tis_variable_str(type.get()) > 0) {
      H5Id mem(check(H5Tcopy(H5T_C_S1), what));
      check(H5Tset_size(mem.get(), H5T_VARIABLE), what);
      char* text = nullptr;
      check(H5Aread(attr.get(), mem.get(), &text), what + " unreadable");
      std::string out = text != nullptr ? text : "";
      H5free_memory(text);
      return out;
    }
    size_t size = H5Tget_size(type.get());
    if (size == 0 || size > (size_t{64} << 20)) fail(what + " has an implausible size");
    std::string buf(size, '\0');
    check(H5Aread(attr.get(), type.get(), buf.data()), what + " unreadable");
    buf.resize(std::strlen(buf.c_str()));
    return buf;
  }

  template <class T>
  T get_number(hid_t loc, const std::string& where, const char* name, hid_t mem_type) const {
    H5Id attr = open_attr(loc, where, name);
    std::string what = "attribute " + where + name;
    H5Id type(check(H5Aget_type(attr.get()), what + " unreadable"));
    H5T_class_t cls = H5Tget_class(type.get());
    if (cls != H5T_INTEGER && cls != H5T_FLOAT) fail(what + " is not a number");
    H5Id space(check(H5Aget_space(attr.get()), what + " unreadable"));
    if (H5Sget_simple_extent_npoints(space.get()) != 1) fail(what + " is not a single value");
    T v{};
    check(H5Aread(attr.get(), mem_type, &v), what + " unreadable");
    return v;
  }

  // Reads a dataset into `out` (resized), checking type class, size limits and its CRC32.
  template <class T>
  std::vector<int64_t> get_dataset(hid_t loc, const std::string& where, const std::string& name,
                                   H5T_class_t cls, hid_t mem_type, std::vector<T>& out) const {
    std::string what = "dataset " + where + name;
    htri_t exists = path_exists(loc, name);
    if (exists <= 0) fail(what + " is missing");
    H5Id dset(check(H5Dopen2(loc, name.c_str(), H5P_DEFAULT), what + " cannot be opened"));
    H5Id type(check(H5Dget_type(dset.get()), what + " unreadable"));
    if (H5Tget_class(type.get()) != cls) fail(what + " has an unexpected element type");
    H5Id space(check(H5Dget_space(dset.get()), what + " unreadable"));
    int rank = check(H5Sget_simple_extent_ndims(space.get()), what + " unreadable");
    std::vector<hsize_t> dims(static_cast<size_t>(rank));
    if (rank > 0) check(H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr), what);
    uint64_t count = 1;
    for (hsize_t d : dims) {
      if (d > kMaxTensorValues || count * d > kMaxTensorValues)
        fail(what + " has an implausible size");
      count *= d;
    }
    out.assign(count, T{});
    if (count > 0)
      check(H5Dread(dset.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()),
            what + " is truncated or corrupt");
    auto stored = get_number<uint32_t>(dset.get(), what + ":", "crc32", H5T_NATIVE_UINT32);
    if (stored != crc_of(out.data(), out.size() * sizeof(T)))
      fail(what + " is corrupt (its values do not match their CRC32)");
    return std::vector<int64_t>(dims.begin(), dims.end());
  }

  std::vector<NamedTensor> get_tensors(hid_t file, const char* group_name) const {
    std::string where = std::string("/") + group_name + "/";
    if (path_exists(file, group_name) <= 0) fail("group " + where + " is missing");
    H5Id group(check(H5Gopen2(file, group_name, H5P_DEFAULT), "group " + where + " unreadable"));
    std::vector<NamedTensor> out;
    std::istringstream names(get_string(group.get(), where, "names"));
    for (std::string name; std::getline(names, name);) {
      NamedTensor t;
      t.name = name;
      t.shape = get_dataset(group.get(), where, name, H5T_FLOAT, H5T_NATIVE_FLOAT, t.data);
      // Lockstep never saves a NaN or an infinity (a non-finite step is stopped or skipped before
      // its update): one here is damage the CRC32 was computed over, an edited file say.
      for (size_t i = 0; i < t.data.size(); ++i)
        if (!std::isfinite(t.data[i]))
          fail(where + name + " holds a non-finite value (" + std::to_string(t.data[i]) +
               " at element " + std::to_string(i) + "), which Lockstep never saves");
      out.push_back(std::move(t));
    }
    return out;
  }

  // H5Lexists fails on "a/b" when "a" is missing: walk the path one link at a time.
  static htri_t path_exists(hid_t loc, const std::string& path) {
    size_t pos = 0;
    while (true) {
      size_t slash = path.find('/', pos);
      std::string prefix = path.substr(0, slash);
      htri_t e = H5Lexists(loc, prefix.c_str(), H5P_DEFAULT);
      if (e <= 0 || slash == std::string::npos) return e;
      pos = slash + 1;
    }
  }

 private:
  std::string path_;
};

struct ScalarVisit {
  const Reader* reader;
  std::map<std::string, double>* out;
  std::string failed;
};

herr_t collect_scalar(hid_t loc, const char* name, const H5A_info_t*, void* data) {
  auto* visit = static_cast<ScalarVisit*>(data);
  H5Id attr(H5Aopen(loc, name, H5P_DEFAULT));
  double v = 0;
  if (!attr.valid() || H5Aread(attr.get(), H5T_NATIVE_DOUBLE, &v) < 0) {
    visit->failed = name;
    return -1;
  }
  (*visit->out)[name] = v;
  return 0;
}

}  // namespace

void write_checkpoint_h5(const std::string& path, const CheckpointState& s) {
  Hdf5Lock lock;
  H5Id fapl(LS_CHECK_HDF5(H5Pcreate(H5P_FILE_ACCESS)));
  LS_CHECK_HDF5(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V110, H5F_LIBVER_V110));
  LS_CHECK_HDF5(H5Pset_fclose_degree(fapl.get(), H5F_CLOSE_STRONG));
  H5Id file(LS_CHECK_HDF5(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get())));
  hid_t root = file.get();
  put_string(root, "format", kFormatName);
  put_i64(root, "format_version", s.format_version);
  put_string(root, "model_spec", s.model_spec);
  put_string(root, "config", s.config);
  put_i64(root, "world_size", s.world_size);
  put_i64(root, "epoch", s.epoch);
  put_i64(root, "step_in_epoch", s.step_in_epoch);
  put_i64(root, "global_step", s.global_step);
  put_u64(root, "seed", s.seed);
  put_dataset(root, "rng", {s.rng_state.size()}, H5T_STD_U64LE, H5T_NATIVE_UINT64,
              s.rng_state.data(), s.rng_state.size() * sizeof(uint64_t));
  put_tensors(root, "params", s.params);
  put_tensors(root, "optimizer", s.optimizer);
  {
    H5Id group(LS_CHECK_HDF5(H5Gcreate2(root, "scalars", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
    for (const auto& [name, value] : s.scalars)
      put_attr(group.get(), name.c_str(), H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value);
  }
  LS_CHECK_HDF5(H5Fflush(root, H5F_SCOPE_GLOBAL));
  LS_CHECK_HDF5(H5Fclose(file.release()));
}

CheckpointState read_checkpoint_h5(const std::string& path, bool header_only) {
  Hdf5Lock lock;
  Reader r(path);
  htri_t is_hdf5 = H5Fis_hdf5(path.c_str());
  if (is_hdf5 <= 0) r.fail("not an HDF5 file (truncated, overwritten or not a checkpoint)");
  // Default access properties: the same file may already be open in this process (a dataset
  // passed by mistake), and HDF5 refuses a second open with a different close degree.
  H5Id file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  // h5_open_failure takes HDF5's reason off the stack: fail() adds nothing after it.
  if (!file.valid()) r.fail(h5_open_failure("the file is truncated or corrupt"));
  hid_t root = file.get();
  CheckpointState s;
  if (H5Aexists(root, "format") <= 0 || r.get_string(root, "/", "format") != kFormatName)
    r.fail("not a Lockstep checkpoint (no format=\"" + std::string(kFormatName) + "\" attribute)");
  int64_t version = r.get_number<int64_t>(root, "/", "format_version", H5T_NATIVE_INT64);
  if (version != kCheckpointFormatVersion)
    r.fail("format version " + std::to_string(version) + " is not supported (this build reads " +
           "version " + std::to_string(kCheckpointFormatVersion) + ")");
  s.format_version = static_cast<int>(version);
  s.model_spec = r.get_string(root, "/", "model_spec");
  s.config = r.get_string(root, "/", "config");
  s.world_size = static_cast<int>(r.get_number<int64_t>(root, "/", "world_size", H5T_NATIVE_INT64));
  s.epoch = static_cast<int>(r.get_number<int64_t>(root, "/", "epoch", H5T_NATIVE_INT64));
  s.step_in_epoch = r.get_number<int64_t>(root, "/", "step_in_epoch", H5T_NATIVE_INT64);
  s.global_step = r.get_number<int64_t>(root, "/", "global_step", H5T_NATIVE_INT64);
  s.seed = r.get_number<uint64_t>(root, "/", "seed", H5T_NATIVE_UINT64);
  if (s.world_size < 1 || s.epoch < 0 || s.step_in_epoch < 0 || s.global_step < 0)
    r.fail("its position (world size, epoch, step) is out of range");
  if (header_only) return s;
  r.get_dataset(root, "/", "rng", H5T_INTEGER, H5T_NATIVE_UINT64, s.rng_state);
  s.params = r.get_tensors(root, "params");
  s.optimizer = r.get_tensors(root, "optimizer");
  if (Reader::path_exists(root, "scalars") <= 0) r.fail("group /scalars/ is missing");
  H5Id scalars(r.check(H5Gopen2(root, "scalars", H5P_DEFAULT), "group /scalars/ unreadable"));
  ScalarVisit visit{&r, &s.scalars, {}};
  hsize_t idx = 0;
  if (H5Aiterate2(scalars.get(), H5_INDEX_NAME, H5_ITER_INC, &idx, collect_scalar, &visit) < 0)
    r.fail("scalar '" + visit.failed + "' in /scalars/ is unreadable");
  return s;
}

}  // namespace lockstep::detail
