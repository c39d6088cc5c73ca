// The private parts of runtime/data/dataset.cpp that the reader (dataset_reader.cpp) shares: one
// split's open handles and what inspect_dataset reports of it, the opening and checking of a split,
// and the "FILE: GROUP/DATASET" of messages. Not installed (scripts/package/package.cmake). Every
// HDF5 call here takes the process-wide Hdf5Lock (hdf5_util.h). No collective calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/data/dataset.h"
#include "runtime/data/h5_read.h"
#include "runtime/data/hdf5_util.h"

namespace lockstep::dataset_detail {

// Every open handle of one split, plus what inspect_dataset reports about it.
struct Split {
  H5Id file, group, x, y;
  DatasetInfo info;
  std::vector<int64_t> x_dims, y_dims;
  size_t x_size = 0, y_size = 0;  // bytes per stored element
  h5_read::Elem x_elem = h5_read::Elem::u8, y_elem = h5_read::Elem::u8;
  // An enum dataset's type in native form (h5py's bool; h5_read::native_enum): its rows are read
  // as it, not converted. Invalid for other datasets, read as native_type(elem).
  H5Id x_enum, y_enum;
  bool tokens = false;  // a token split: no y, targets come from x
};

// The memory type one dataset's rows are read as (Split's x_enum / y_enum, else its Elem's).
inline hid_t read_type(const H5Id& enum_type, h5_read::Elem e) {
  return enum_type.valid() ? enum_type.get() : h5_read::native_type(e);
}

// "FILE: GROUP/NAME" (no group for a split at the root), for messages.
std::string where(const DatasetInfo& info, const std::string& name);

// Opens and checks the split `spec` names (the file, the group, its inputs and, unless
// spec.inputs_only, its targets; the label rule), throwing UsageError naming what is wrong; with
// chunk_cache_bytes > 0 the inputs get a chunk cache of that size.
Split open_split(const DatasetSpec& spec, int64_t chunk_cache_bytes);

}  // namespace lockstep::dataset_detail
