// Where a dataset's values come from, for the cases in which HDF5 hands back values no writer
// put there, or fails vaguely: data in other files, which HDF5 reaches without the reader asking,
// and storage that was never written.
//
// Never written: HDF5 allocates a chunk, or a contiguous dataset's storage, at its first write,
// and reads what was never allocated as the fill value (zeros) without an error. A writer that
// stopped early (a crash, a job out of time) leaves a file whose later rows read as blank:
// require_written refuses such a dataset, naming the rows, unless the writer gave it a fill value
// of its own (H5Pset_fill_value, h5py's fillvalue=): then unwritten rows are meant to read as it.
//
// Virtual datasets (HDF5's VDS): a dataset whose rows are mapped from datasets in other files, as
// a corpus split into shard files is joined into one. HDF5 reads the rows of a source it cannot
// open (a shard moved, renamed or deleted, a dataset missing in it, a source shorter than its
// mapping) as the dataset's fill value, zeros, without an error: a run would train on blank rows.
// require_virtual_sources finds every such source before any row is read (a source with a
// filter this HDF5 cannot decode, or storage never written, too). row_sources opens the sources
// of a virtual dataset that lays whole rows of them end to end, for the loader to read directly.
//
// A source file is looked for as HDF5 does: "." is the virtual dataset's own file; otherwise the
// name as written (absolute, or from the current folder), under each prefix of HDF5_VDS_PREFIX
// (':'-separated; "${ORIGIN}" is the virtual dataset file's folder), and in the virtual dataset
// file's folder (an absolute name by its last component there). A source found in any of these
// places counts as found. Mappings with printf-style names (%b) or unlimited selections, whose
// extent HDF5 takes from the sources it finds, are not checked.
//
// External links (a group or dataset that lives in another file): HDF5 fails to open one whose
// file or object is gone as if nothing were there; external_link_problem says which link and why.
//
// Thread-safety: callable from any thread (its HDF5 calls run under Hdf5Lock). No collective calls.
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

// Throws UsageError naming `what` where part of `dset`'s storage was never written: a chunked
// dataset with fewer chunks allocated than its shape needs (the first unwritten chunk's rows and
// the count), a contiguous one with no storage at all. Does nothing for compact and virtual
// datasets, empty ones, and those with a user-defined fill value.
void require_written(hid_t dset, const std::string& what);

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

// External storage (H5Pset_external, h5py's external=): a contiguous dataset whose bytes lie in
// raw files beside the HDF5 file. HDF5 reads the bytes past the end of a raw file cut short as
// zeros, without an error, and fails only at the read when a raw file is missing. Throws
// UsageError naming `what`, the rows and the raw file where one is missing (looked for where HDF5
// 1.10 looks: under HDF5_EXTFILE_PREFIX or the dataset's efile prefix, "${ORIGIN}" being the HDF5
// file's folder, else from the current folder; a file found beside the HDF5 file instead is
// said) or shorter than the bytes stored in it. Does nothing for other datasets. `h5_path` is the
// path of the file that holds `dset`.
void require_external_files(hid_t dset, const std::string& h5_path, const std::string& what);

// Where `name` in `loc` is an external link that HDF5 could not follow: "'name' is an external
// link to FILE:OBJECT, and <why>" (the file not found, not HDF5, or without the object). "" for
// any other link, or one that can be followed.
std::string external_link_problem(hid_t loc, const std::string& name);

}  // namespace lockstep
