// Writing HDF5 files the way Lockstep lays them out (lockstep-data, checkpoints), and reading back
// what it writes: N-d datasets of float32/float64/uint8/int32/int64, optionally chunked and
// gzip-compressed, and scalar, array and string attributes on files, groups and datasets.
//
// Files are little-endian standard types (H5T_IEEE_F32LE, H5T_STD_U8LE, ...); strings are
// variable-length UTF-8, as h5py writes them. Readers accept what other tools write: numeric
// attributes of any integer or float type, fixed- or variable-length strings.
//
// Every function takes the process-wide Hdf5Lock (hdf5_util.h), so any thread may call them.
// Failures of the library are Error (LS_CHECK_HDF5); a failed write of a dataset's values (a full
// disk) is Error "writing FILE failed: REASON", as in close_h5_file; a path that cannot be
// created, or an attribute of the wrong kind, is a UsageError naming the file and the object.
// No collective calls: a file is written by the one rank that calls.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/base/dtype.h"
#include "runtime/data/hdf5_util.h"

namespace lockstep {

// Creates `path`, replacing an existing file. Throws UsageError naming the path on failure.
H5Id create_h5_file(const std::string& path);
// Flushes and closes a file that `file` owns, checking each step, which the H5Id destructor cannot
// report: on a full disk, or when the file system reports a write error only at close, this is
// where HDF5 fails. Call it before a written file is used or renamed into place. `file` is empty
// afterwards, also when it throws. Throws Error "writing PATH failed: REASON" (the system's reason
// where there is one: "No space left on device"), also when an object in the file is still open,
// as it would keep the file open past the close.
void close_h5_file(H5Id& file, const std::string& path);
// Opens an existing file for reading and writing (a checkpoint appended to, for example).
H5Id open_h5_readwrite(const std::string& path);

// Opens the group at `path` under `loc` ("train", "a/b"), creating it and its parents if missing.
H5Id ensure_h5_group(hid_t loc, const std::string& path);

// "file.h5:/train/images": where an object is, for messages; h5_file_name: "file.h5" alone.
std::string h5_object_name(hid_t obj);
std::string h5_file_name(hid_t obj);

struct H5WriteOptions {
  // Chunk dimensions, one per data dimension. Empty: contiguous storage, or, when gzip_level > 0,
  // chunks of whole rows of about kDefaultChunkBytes.
  std::vector<int64_t> chunk;
  int gzip_level = 0;    // 0 = none; 1..9 = deflate level
  bool shuffle = false;  // byte-shuffle filter before deflate (helps multi-byte numbers compress)
};
constexpr int64_t kDefaultChunkBytes = 64 * 1024;

// Chunk dimensions of whole rows (first dimension) totalling about `target_bytes`.
std::vector<int64_t> row_chunk(const std::vector<int64_t>& shape, size_t element_size,
                               int64_t target_bytes = kDefaultChunkBytes);

// Writes `data` (row-major, product(shape) elements of `type`) as dataset `name` under `loc`
// ("x" or "train/x": missing parent groups are created). Replaces nothing: the name must be new.
// An empty shape writes a scalar. Types: f32, f64, u8, i32, i64.
void write_h5_dataset(hid_t loc, const std::string& name, DType type,
                      const std::vector<int64_t>& shape, const void* data,
                      const H5WriteOptions& options = {});

template <class T>
void write_h5_dataset(hid_t loc, const std::string& name, const std::vector<int64_t>& shape,
                      const std::vector<T>& data, const H5WriteOptions& options = {}) {
  write_h5_dataset(loc, name, dtype_of<T>(), shape, data.data(), options);
}

// A whole dataset read back: its shape, and its values converted to `type` into `out`, which holds
// exactly `count` elements (a mismatch is a UsageError naming the dataset).
std::vector<int64_t> h5_dataset_shape(hid_t loc, const std::string& name);
void read_h5_dataset(hid_t loc, const std::string& name, DType type, void* out, size_t count);

// Attributes; writing replaces an attribute of the same name.
void write_h5_attr_int(hid_t obj, const std::string& name, int64_t value);
void write_h5_attr_double(hid_t obj, const std::string& name, double value);
void write_h5_attr_doubles(hid_t obj, const std::string& name, const std::vector<double>& values);
void write_h5_attr_string(hid_t obj, const std::string& name, const std::string& value);
void write_h5_attr_strings(hid_t obj, const std::string& name,
                           const std::vector<std::string>& values);

bool has_h5_attr(hid_t obj, const std::string& name);
// nullopt when absent. A numeric read of a non-numeric attribute, or a single-value read of an
// attribute holding several values, is a UsageError naming the object and the attribute.
std::optional<double> read_h5_attr_double(hid_t obj, const std::string& name);
std::optional<int64_t> read_h5_attr_int(hid_t obj, const std::string& name);
std::optional<std::vector<double>> read_h5_attr_doubles(hid_t obj, const std::string& name);
std::optional<std::string> read_h5_attr_string(hid_t obj, const std::string& name);
std::optional<std::vector<std::string>> read_h5_attr_strings(hid_t obj, const std::string& name);

// The file and memory HDF5 types for a DType (f32, f64, u8, i32, i64; others throw Error).
hid_t h5_file_type(DType type);
hid_t h5_memory_type(DType type);

}  // namespace lockstep
