// Reading helpers of the dataset reader (dataset.cpp): how HDF5 types and shapes read in
// messages, the stored element types it accepts and their conversion, the chunk cache of a
// shuffled reader, reading chosen rows as runs, and reading a whole split chunk by chunk. Every
// HDF5 call is the caller's to serialise (the process-wide Hdf5Lock, hdf5_util.h), read_all_rows
// excepted; the functions are otherwise stateless. No collective calls.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "runtime/data/hdf5_util.h"

namespace lockstep::h5_read {

// "(60000, 28, 28, 1)", "(10,)".
std::string shape_text(const std::vector<int64_t>& shape);
// "uint8", "float32", "string", ...
std::string type_text(hid_t type);
// "it holds images, labels" (at most 20 names), or "it is empty".
std::string holds_text(hid_t group);
std::vector<int64_t> dims_of(hid_t dset);

// Stored element types the reader accepts: every integer and IEEE float width files use. Rows are
// read in the file's own type (HDF5 then converts nothing) and converted here: a converting
// H5Dread allocates and zeroes a 1 MiB conversion buffer on every call, which dominated the
// per-run reads below.
// f16 is IEEE half precision (numpy's float16), widened exactly.
enum class Elem { u8, i8, u16, i16, u32, i32, u64, i64, f16, f32, f64 };

std::optional<Elem> elem_of(hid_t type);  // none for a type the reader does not take
hid_t native_type(Elem e);
// An enum type (h5py's bool) in native form, to read its values without HDF5 converting them to
// native_type(elem_of(type)) on every read (a shuffled read of bool labels ran 2.5x slower so);
// invalid for any other type.
H5Id native_enum(hid_t type);

template <class In, class Out>
void convert_as(const unsigned char* in, size_t n, Out* out) {
  for (size_t i = 0; i < n; ++i) {
    In v;
    std::memcpy(&v, in + i * sizeof(In), sizeof(In));
    out[i] = static_cast<Out>(v);
  }
}

// An IEEE half's bits as the float of the same value (every half is exactly a float).
inline float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16, exponent = (h >> 10) & 0x1fu,
                 mantissa = h & 0x3ffu;
  uint32_t bits;
  if (exponent == 31) {
    bits = sign | 0x7f800000u | (mantissa << 13);  // infinity, NaN
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;
  } else {  // subnormal: mantissa * 2^-24, normalised as a float
    int shift = 0;
    uint32_t m = mantissa;
    while ((m & 0x400u) == 0) {
      m <<= 1;
      ++shift;
    }
    bits = sign | (static_cast<uint32_t>(113 - shift) << 23) | ((m & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

template <class Out>
void convert_half(const unsigned char* in, size_t n, Out* out) {
  for (size_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, in + i * sizeof h, sizeof h);
    out[i] = static_cast<Out>(half_to_float(h));
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
    case Elem::f16: return convert_half(in, n, out);
    case Elem::f32: return convert_as<float>(in, n, out);
    case Elem::f64: return convert_as<double>(in, n, out);
  }
}

// Bytes of one of `dset`'s chunks decompressed; 0 for a dataset that is not chunked.
int64_t chunk_bytes(hid_t dset);
// A dataset access property list whose chunk cache holds cache_bytes of decompressed chunks.
H5Id chunk_cache_access(hid_t dset, int64_t cache_bytes);

// Reads rows `sorted` (ascending, distinct) of `dset` (shape `dims`) into `buf`, packed in that
// order, one H5Dread per run of consecutive rows; a failed read is a SharedInputError naming
// `what` and the rows (h5_read.cpp says why runs).
void read_runs(hid_t dset, hid_t file_space, const std::vector<int64_t>& dims,
               const std::vector<int64_t>& sorted, hid_t mem_type, void* buf,
               const std::string& what);

// Reads every row of `dset` (shape `dims`) into `buf`, in the file's own type `mem_type`, by
// reading its chunks as stored and decompressing them on up to `threads` threads (libdeflate where
// the build found it, else zlib): the same bytes as one H5Dread, several times faster for a gzip
// split held in memory (HDF5 inflates one chunk after another, with zlib). Takes the Hdf5Lock
// itself, for its HDF5 calls only, so the decompression runs beside other threads' HDF5 work.
// Returns false, having read nothing, where the layout is not one it decodes (not chunked, a
// chunk narrower than a row, filters other than gzip and shuffle, a stored type other than
// mem_type): the caller reads the rows by read_runs then. A chunk never written or stored
// unfiltered is read by HDF5. A chunk that does not decompress to its size is a SharedInputError
// naming `what` and its rows.
bool read_all_rows(hid_t dset, const std::vector<int64_t>& dims, hid_t mem_type, void* buf,
                   const std::string& what, int threads);

}  // namespace lockstep::h5_read
