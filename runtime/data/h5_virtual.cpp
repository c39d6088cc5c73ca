#include "runtime/data/h5_virtual.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "runtime/base/error.h"
#include "runtime/data/hdf5_util.h"

namespace lockstep {

namespace {

namespace fs = std::filesystem;

// One of H5Pget_virtual_filename / H5Pget_virtual_dsetname for mapping i: asked for the length
// first, then the text.
template <class Get>
std::string mapping_text(Get get, hid_t dcpl, size_t i) {
  const ssize_t n = get(dcpl, i, nullptr, 0);
  if (n < 0) {
    hdf5_error_text();
    return "";
  }
  std::string s(static_cast<size_t>(n) + 1, '\0');
  get(dcpl, i, s.data(), s.size());
  s.resize(static_cast<size_t>(n));
  return s;
}

// The places HDF5 looks for a source file named `name` (h5_virtual.h), in its order.
std::vector<fs::path> candidates(const std::string& name, const std::string& vds_path) {
  const fs::path written(name), origin = fs::path(vds_path).parent_path();
  const fs::path tail = written.is_absolute() ? written.filename() : written;
  std::vector<fs::path> out{written};
  if (const char* env = std::getenv("HDF5_VDS_PREFIX"); env != nullptr) {
    std::string prefixes = env;
    for (size_t at = 0; at <= prefixes.size();) {
      size_t end = prefixes.find(':', at);
      if (end == std::string::npos) end = prefixes.size();
      std::string prefix = prefixes.substr(at, end - at);
      if (const size_t o = prefix.find("${ORIGIN}"); o != std::string::npos)
        prefix.replace(o, 9, origin.empty() ? "." : origin.string());
      if (!prefix.empty()) out.push_back(fs::path(prefix) / tail);
      at = end + 1;
    }
  }
  out.push_back((origin.empty() ? fs::path(".") : origin) / tail);
  return out;
}

// Why the rows mapped from `file_name`:`dset_name` (the source selection `src`, placed at the
// virtual selection `vspace`) would be read as fill values, or "" when HDF5 can read them.
std::string source_problem(const std::string& file_name, const std::string& dset_name, hid_t src,
                           hid_t vspace, const std::string& vds_path) {
  std::string path = vds_path;
  if (file_name != ".") {
    path.clear();
    std::string looked;
    std::vector<fs::path> seen;
    for (const fs::path& p : candidates(file_name, vds_path)) {
      std::error_code ec;
      if (fs::is_regular_file(p, ec)) {
        path = p.string();
        break;
      }
      const fs::path place = fs::absolute(p, ec).lexically_normal();
      if (std::find(seen.begin(), seen.end(), place) != seen.end()) continue;
      seen.push_back(place);
      looked += (looked.empty() ? "" : ", ") + place.string();
    }
    if (path.empty())
      return "that file cannot be found (looked for " + looked +
             "; HDF5_VDS_PREFIX names other folders)";
  }
  H5Id file;
  try {
    file = open_h5_readonly(path);
  } catch (const UsageError& e) {
    return e.what();
  }
  const hid_t id = H5Dopen2(file.get(), dset_name.c_str(), H5P_DEFAULT);
  if (id < 0) {
    hdf5_error_text();
    return path + " holds no dataset " + dset_name;
  }
  H5Id dset(id), space(LS_CHECK_HDF5(H5Dget_space(dset.get())));
  const int rank = H5Sget_simple_extent_ndims(space.get());
  std::vector<hsize_t> dims(static_cast<size_t>(std::max(rank, 0))), lo(dims.size()),
      hi(dims.size());
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  if (H5Sget_select_type(src) == H5S_SEL_ALL) {
    // The whole source, element for element: HDF5 may already have set `src`'s extent to the
    // source's, so the count is taken from the virtual side.
    hsize_t have = 1;
    std::string shape;
    for (size_t d = 0; d < dims.size(); ++d) {
      have *= dims[d];
      shape += (d ? ", " : "") + std::to_string(dims[d]);
    }
    const hssize_t want = H5Sget_select_npoints(vspace);
    if (want >= 0 && have != static_cast<hsize_t>(want))
      return path + ":" + dset_name + " has shape (" + shape + "), " + std::to_string(have) +
             " values where the mapping takes " + std::to_string(want);
    return "";
  }
  if (H5Sget_simple_extent_ndims(src) != rank) return "";  // HDF5 refuses the read itself
  if (H5Sget_select_npoints(src) <= 0 || H5Sget_select_bounds(src, lo.data(), hi.data()) < 0) {
    hdf5_error_text();
    return "";
  }
  for (size_t d = 0; d < dims.size(); ++d)
    if (hi[d] >= dims[d])
      return path + ":" + dset_name + " has " + std::to_string(dims[d]) + " along dimension " +
             std::to_string(d) + ", and the mapping reads up to index " + std::to_string(hi[d]);
  return "";
}

}  // namespace

void require_virtual_sources(hid_t dset, const std::string& vds_path, const std::string& what) {
  Hdf5Lock lock;
  H5Id dcpl(LS_CHECK_HDF5(H5Dget_create_plist(dset)));
  if (H5Pget_layout(dcpl.get()) != H5D_VIRTUAL) return;
  size_t count = 0;
  LS_CHECK_HDF5(H5Pget_virtual_count(dcpl.get(), &count));
  for (size_t i = 0; i < count; ++i) {
    const std::string file_name = mapping_text(H5Pget_virtual_filename, dcpl.get(), i);
    const std::string dset_name = mapping_text(H5Pget_virtual_dsetname, dcpl.get(), i);
    if (file_name.empty() || dset_name.empty()) continue;
    if (file_name.find('%') != std::string::npos || dset_name.find('%') != std::string::npos)
      continue;  // printf-style: the extent comes from the sources found
    H5Id vspace(LS_CHECK_HDF5(H5Pget_virtual_vspace(dcpl.get(), i)));
    H5Id src(LS_CHECK_HDF5(H5Pget_virtual_srcspace(dcpl.get(), i)));
    if (H5Sis_regular_hyperslab(vspace.get()) > 0) {
      // An unlimited selection (count H5S_UNLIMITED) grows with its source: nothing to miss.
      const int rank = H5Sget_simple_extent_ndims(vspace.get());
      std::vector<hsize_t> start(rank), stride(rank), cnt(rank), block(rank);
      H5Sget_regular_hyperslab(vspace.get(), start.data(), stride.data(), cnt.data(), block.data());
      bool unlimited = false;
      for (int d = 0; d < rank; ++d) unlimited |= cnt[d] == H5S_UNLIMITED;
      if (unlimited) continue;
    }
    hdf5_error_text();
    const std::string problem =
        source_problem(file_name, dset_name, src.get(), vspace.get(), vds_path);
    if (problem.empty()) continue;
    std::string rows;
    const int rank = H5Sget_simple_extent_ndims(vspace.get());
    std::vector<hsize_t> lo(static_cast<size_t>(std::max(rank, 1))), hi(lo.size());
    if (rank > 0 && H5Sget_select_bounds(vspace.get(), lo.data(), hi.data()) >= 0)
      rows = "rows " + std::to_string(lo[0]) + "-" + std::to_string(hi[0]) + " ";
    hdf5_error_text();
    throw UsageError(what + ": is a virtual dataset whose " + rows + "come from " + file_name +
                     ":" + dset_name + ", and " + problem +
                     " (HDF5 would read those rows as zeros, or fail on them; put the source "
                     "back, or write the dataset out whole)");
  }
}

}  // namespace lockstep
