// Where a dataset's values come from, for the cases in which HDF5 hands back values no writer
// put there, or fails vaguely: storage that was never written, and data in other files, which
// HDF5 reaches without the reader asking (virtual datasets have h5_virtual.h).
//
// Never written: HDF5 allocates a chunk, or a contiguous dataset's storage, at its first write,
// and reads what was never allocated as the fill value (zeros) without an error. A writer that
// stopped early (a crash, a job out of time) leaves a file whose later rows read as blank:
// require_written refuses such a dataset, naming the rows, unless the writer gave it a fill value
// of its own (H5Pset_fill_value, h5py's fillvalue=): then unwritten rows are meant to read as it.
//
// External links (a group or dataset that lives in another file): HDF5 fails to open one whose
// file or object is gone as if nothing were there; external_link_problem says which link and why.
// External storage (raw files beside the HDF5 file): require_external_files.
//
// Thread-safety: callable from any thread (their HDF5 calls run under Hdf5Lock; find_linked_file
// makes none). No collective calls.
#pragma once

#include <hdf5.h>

#include <string>

namespace lockstep {

// Throws UsageError naming `what` where part of `dset`'s storage was never written: a chunked
// dataset with fewer chunks allocated than its shape needs (the first unwritten chunk's rows and
// the count), a contiguous one with no storage at all. Does nothing for compact and virtual
// datasets, empty ones, and those with a user-defined fill value.
void require_written(hid_t dset, const std::string& what);

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

// The file HDF5 opens for another file named `name` by the HDF5 file at `here` (an external
// link's, a virtual dataset's source), looked for as HDF5 does: the name as written (absolute, or
// from the current folder), under each prefix of the ':'-separated environment variable
// `prefix_env` (HDF5_EXT_PREFIX, HDF5_VDS_PREFIX; "${ORIGIN}" is `here`'s folder), and in `here`'s
// folder (an absolute name by its last component there). "" when none of those places holds a
// file; then *missing says so: "that file cannot be found (looked for ...)".
std::string find_linked_file(const std::string& name, const std::string& here,
                             const char* prefix_env, std::string* missing);

}  // namespace lockstep
