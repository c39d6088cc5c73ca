// Virtual datasets (HDF5's VDS): a dataset whose rows are mapped from datasets in other files, as
// a corpus split into shard files is joined into one (lockstep-data join, h5py's VirtualLayout).
// HDF5 reads the rows of a source it cannot open (a shard moved, renamed or deleted, a dataset
// missing in it, a source shorter than its mapping) as the dataset's fill value, zeros, without an
// error: a run would train on blank rows. require_virtual_sources finds every such source before
// any row is read (a source with a filter this HDF5 cannot decode, or storage never written, too).
// row_sources opens the sources of a virtual dataset that lays whole rows of them end to end, for
// the loader to read directly.
//
// A source file is looked for as HDF5 does (find_linked_file in h5_sources.h, with
// HDF5_VDS_PREFIX); "." is the virtual dataset's own file. A source found in any of those places
// counts as found. Mappings with printf-style names (%b) or unlimited selections, whose extent
// HDF5 takes from the sources it finds, are not checked.
//
// Thread-safety: callable from any thread (their HDF5 calls run under Hdf5Lock). No collective
// calls.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/data/hdf5_util.h"

namespace lockstep {

// Throws UsageError naming `what` (e.g. "data.h5: train/images"), the rows of the first source
// that HDF5 would read as fill values, the file and dataset they come from, and why (no such file,
// not readable, no such dataset, fewer rows than mapped, a filter this HDF5 cannot decode,
// storage never written), or that this process could not keep open at once: HDF5 keeps each
// source open once read and reads one it has no file descriptor for as zeros, so the soft limit
// on open files (ulimit -n) is raised toward the hard one where the sources need it, and a split
// over more sources than the hard limit allows is refused. Does nothing for a dataset that is
// not virtual. `vds_path` is the path of the file that holds `dset`.
void require_virtual_sources(hid_t dset, const std::string& vds_path, const std::string& what);

// One source of a virtual dataset that lays its sources' rows end to end.
struct RowSource {
  H5Id file, dset, space;     // the source, open for reading
  std::vector<int64_t> dims;  // its extent
  int64_t first = 0;          // the virtual dataset's first row that comes from it
  int64_t rows = 0;           // how many
  int64_t src_first = 0;      // the source's row that `first` is
  std::string what;           // "shards/s0.h5: /train/images", for messages
};

// `dset`'s sources, ascending by `first`, when it is a virtual dataset each of whose mappings
// places whole rows of a source of the same type and row shape at whole rows, the mappings
// covering every row once (lockstep-data join's files, h5py's VirtualLayout of whole shards):
// the loader then reads the sources directly, as HDF5 would read them but without its work of
// mapping each read through the virtual dataset (twice the time of a shuffled read,
// docs/PERFORMANCE.md "A split joined from shard files"). Each source gets a chunk cache of
// chunk_cache_bytes shared out over the sources (at least one chunk; 0: HDF5's default).
// Empty for any other dataset, which the caller reads through HDF5. Call after
// require_virtual_sources, which names what is wrong with a source.
// A source that require_virtual_sources found but that cannot be opened now throws UsageError
// naming `what` and the rows (HDF5 would read them as zeros).
std::vector<RowSource> row_sources(hid_t dset, const std::string& vds_path,
                                   int64_t chunk_cache_bytes, const std::string& what);

}  // namespace lockstep
