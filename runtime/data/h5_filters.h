// HDF5 filters (compression and the like) that datasets from other tools use, by name, and whether
// this process can decode them. Reading a chunk whose filter is not available fails deep inside
// H5Dread; checking the dataset's filters when it is opened turns that into one UsageError naming
// the filter and the fix, the same for lockstep-data inspect and the loader.
//
// Filters other than gzip, shuffle, fletcher32, szip, nbit and scaleoffset come from plugins that
// HDF5 loads from HDF5_PLUGIN_PATH, by default /usr/lib/<arch>/hdf5/serial/plugins on Debian:
// LZF and Bitshuffle (bitshuffle), LZ4 and bzip2 (hdf5-filter-plugin), Blosc
// (hdf5-filter-plugin-blosc-serial), installed by scripts/setup.sh; Zstandard is not. Callers
// hold the Hdf5Lock.
// Thread-safe under that lock. No collective calls.
#pragma once

#include <hdf5.h>

#include <string>

namespace lockstep {

// "gzip", "LZF", "Blosc", ... or "filter <id>" for one not known here.
std::string h5_filter_name(H5Z_filter_t id);

// The filters of `dset` in pipeline order, e.g. "shuffle, gzip 4"; empty when it has none.
std::string h5_filters_text(hid_t dset);

// Throws UsageError "<where>: is compressed with the <name> filter (HDF5 id <id>), which this
// HDF5 cannot decode: ..." naming the package that provides it and `h5repack -f NONE`, when a
// filter of `dset` is neither built in nor found as a plugin.
void require_h5_filters(hid_t dset, const std::string& where);

}  // namespace lockstep
