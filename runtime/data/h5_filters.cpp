#include "runtime/data/h5_filters.h"

#include <vector>

#include "runtime/base/error.h"
#include "runtime/data/hdf5_util.h"

namespace lockstep {
namespace {

struct KnownFilter {
  H5Z_filter_t id;
  const char* name;
  const char* package;  // the Debian package with its plugin; null: built into libhdf5
};

// Registered ids (https://github.com/HDFGroup/hdf5_plugins, "registered filters").
constexpr KnownFilter kKnown[] = {
    {H5Z_FILTER_DEFLATE, "gzip", nullptr},
    {H5Z_FILTER_SHUFFLE, "shuffle", nullptr},
    {H5Z_FILTER_FLETCHER32, "fletcher32", nullptr},
    {H5Z_FILTER_SZIP, "szip", nullptr},
    {H5Z_FILTER_NBIT, "nbit", nullptr},
    {H5Z_FILTER_SCALEOFFSET, "scaleoffset", nullptr},
    {307, "bzip2", "hdf5-filter-plugin"},
    {32000, "LZF", "bitshuffle"},  // Debian 12's hdf5-plugin-lzf cannot load (no liblzf link)
    {32001, "Blosc", "hdf5-filter-plugin-blosc-serial"},
    {32004, "LZ4", "hdf5-filter-plugin"},
    {32008, "Bitshuffle", "bitshuffle"},
    {32013, "ZFP", "hdf5-filter-plugin-zfp-serial"},
    {32015, "Zstandard", nullptr},
    {32026, "Blosc2", nullptr},
};

const KnownFilter* find_known(H5Z_filter_t id) {
  for (const KnownFilter& k : kKnown)
    if (k.id == id) return &k;
  return nullptr;
}

std::vector<H5Z_filter_t> filters_of(hid_t dset, std::vector<unsigned>* first_values) {
  H5Id dcpl(LS_CHECK_HDF5(H5Dget_create_plist(dset)));
  const int n = LS_CHECK_HDF5(H5Pget_nfilters(dcpl.get()));
  std::vector<H5Z_filter_t> ids;
  for (int i = 0; i < n; ++i) {
    unsigned flags = 0, config = 0, cd[8] = {};
    size_t ncd = 8;
    char name[64] = {};
    const H5Z_filter_t id = LS_CHECK_HDF5(H5Pget_filter2(
        dcpl.get(), static_cast<unsigned>(i), &flags, &ncd, cd, sizeof name, name, &config));
    ids.push_back(id);
    if (first_values != nullptr) first_values->push_back(ncd > 0 ? cd[0] : 0);
  }
  return ids;
}

}  // namespace

std::string h5_filter_name(H5Z_filter_t id) {
  const KnownFilter* k = find_known(id);
  return k != nullptr ? k->name : "filter " + std::to_string(id);
}

std::string h5_filters_text(hid_t dset) {
  std::vector<unsigned> values;
  const std::vector<H5Z_filter_t> ids = filters_of(dset, &values);
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) s += ", ";
    s += h5_filter_name(ids[i]);
    if (ids[i] == H5Z_FILTER_DEFLATE) s.append(" ").append(std::to_string(values[i]));
  }
  return s;
}

void require_h5_filters(hid_t dset, const std::string& where) {
  for (H5Z_filter_t id : filters_of(dset, nullptr)) {
    // H5Zfilter_avail also looks for a plugin on HDF5_PLUGIN_PATH (or the default folder).
    const htri_t ok = H5Zfilter_avail(id);
    if (ok > 0) continue;
    hdf5_error_text();
    const KnownFilter* k = find_known(id);
    const std::string fix = k != nullptr && k->package != nullptr
                                ? std::string("install Debian's ") + k->package +
                                      " (scripts/setup.sh installs the common ones)"
                                : std::string("install an HDF5 plugin for it");
    throw UsageError(where + ": is compressed with the " + h5_filter_name(id) +
                     " filter (HDF5 "
                     "filter id " +
                     std::to_string(id) + "), which this HDF5 cannot decode: " + fix +
                     " and check HDF5_PLUGIN_PATH, or rewrite the file without filters: "
                     "h5repack -f NONE in.h5 out.h5");
  }
}

}  // namespace lockstep
