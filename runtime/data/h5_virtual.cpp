#include "runtime/data/h5_virtual.h"

#include <sys/resource.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "runtime/base/error.h"
#include "runtime/data/h5_filters.h"
#include "runtime/data/h5_read.h"
#include "runtime/data/h5_sources.h"
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

// Why the rows mapped from `file_name`:`dset_name` (the source selection `src`, placed at the
// virtual selection `vspace`) would be read as fill values, or "" when HDF5 can read them.
std::string source_problem(const std::string& file_name, const std::string& dset_name, hid_t src,
                           hid_t vspace, const std::string& vds_path) {
  std::string missing;
  const std::string path = file_name == "."
                               ? vds_path
                               : find_linked_file(file_name, vds_path, "HDF5_VDS_PREFIX", &missing);
  if (path.empty()) return missing;
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
  try {
    // What the loader checks of a dataset it opens holds for a source too: a shard whose writer
    // stopped early reads as zeros through the virtual dataset as well.
    require_h5_filters(dset.get(), path + ": " + dset_name);
    require_written(dset.get(), path + ": " + dset_name);
  } catch (const UsageError& e) {
    return e.what();
  }
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

// Whether `space`'s selection, on a dataset of extent `dims`, is whole rows [*first, *first +
// *rows): every other dimension whole. An all-selection is every row.
bool selects_whole_rows(hid_t space, const std::vector<int64_t>& dims, int64_t* first,
                        int64_t* rows) {
  const H5S_sel_type type = H5Sget_select_type(space);
  if (type == H5S_SEL_ALL) {
    *first = 0;
    *rows = dims[0];
    return true;
  }
  const int rank = H5Sget_simple_extent_ndims(space);
  if (type != H5S_SEL_HYPERSLABS || rank != static_cast<int>(dims.size())) return false;
  std::vector<hsize_t> lo(dims.size()), hi(dims.size());
  const hssize_t points = H5Sget_select_npoints(space);
  if (points <= 0 || H5Sget_select_bounds(space, lo.data(), hi.data()) < 0) return false;
  hsize_t box = 1;
  for (size_t d = 0; d < dims.size(); ++d) {
    box *= hi[d] - lo[d] + 1;
    if (d > 0 && (lo[d] != 0 || hi[d] + 1 != static_cast<hsize_t>(dims[d]))) return false;
  }
  if (box != static_cast<hsize_t>(points) || hi[0] >= static_cast<hsize_t>(dims[0])) return false;
  *first = static_cast<int64_t>(lo[0]);
  *rows = static_cast<int64_t>(hi[0] - lo[0] + 1);
  return true;
}

// Room for `files` more open files in this process: HDF5 keeps each source of a virtual dataset
// open once read, and reads the rows of one it cannot open, for want of a file descriptor too, as
// the fill value without an error (h5py over 100 shards at `ulimit -n 40`: 65 shards' rows read as
// zeros). The soft limit is raised toward the hard one where the files open now, these and a
// margin (MPI's sockets, the other split, the checkpoint) would pass it; past the hard limit the
// split is refused.
void reserve_open_files(size_t files, const std::string& what) {
  constexpr rlim_t kMargin = 64;
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return;
  rlim_t open_now = 0;
  std::error_code ec;
  for (fs::directory_iterator it("/proc/self/fd", ec), end; !ec && it != end; it.increment(ec))
    ++open_now;
  const rlim_t need = open_now + static_cast<rlim_t>(files) + kMargin;
  if (need <= limit.rlim_cur) return;
  if (limit.rlim_max == RLIM_INFINITY || need <= limit.rlim_max) {
    const rlim_t soft = limit.rlim_cur;
    limit.rlim_cur = limit.rlim_max == RLIM_INFINITY ? need : limit.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &limit) == 0) return;
    limit.rlim_cur = soft;
  }
  throw UsageError(
      what + ": is a virtual dataset over " + std::to_string(files) +
      " files, and this process may have " + std::to_string(limit.rlim_cur) +
      " files open at once (ulimit -n; " + std::to_string(open_now) + " open now, up to " +
      std::to_string(limit.rlim_max == RLIM_INFINITY ? limit.rlim_cur : limit.rlim_max) +
      " allowed): HDF5 reads the rows of a source it cannot open as zeros, without "
      "an error. Raise the limit (ulimit -n; under Slurm the job's limits), or "
      "write the rows into fewer files");
}

}  // namespace

void require_virtual_sources(hid_t dset, const std::string& vds_path, const std::string& what) {
  Hdf5Lock lock;
  H5Id dcpl(LS_CHECK_HDF5(H5Dget_create_plist(dset)));
  if (H5Pget_layout(dcpl.get()) != H5D_VIRTUAL) return;
  size_t count = 0;
  LS_CHECK_HDF5(H5Pget_virtual_count(dcpl.get(), &count));
  std::set<std::string> files;
  for (size_t i = 0; i < count; ++i)
    if (const std::string f = mapping_text(H5Pget_virtual_filename, dcpl.get(), i); f != ".")
      files.insert(f);
  reserve_open_files(files.size(), what);
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

std::vector<RowSource> row_sources(hid_t dset, const std::string& vds_path,
                                   int64_t chunk_cache_bytes, const std::string& what) {
  Hdf5Lock lock;
  H5Id dcpl(LS_CHECK_HDF5(H5Dget_create_plist(dset)));
  size_t count = 0;
  if (H5Pget_layout(dcpl.get()) != H5D_VIRTUAL || H5Pget_virtual_count(dcpl.get(), &count) < 0 ||
      count == 0) {
    hdf5_error_text();
    return {};
  }
  const std::vector<int64_t> dims = h5_read::dims_of(dset);
  H5Id type(LS_CHECK_HDF5(H5Dget_type(dset)));
  std::vector<RowSource> found;
  for (size_t i = 0; i < count; ++i) {
    const std::string file_name = mapping_text(H5Pget_virtual_filename, dcpl.get(), i);
    const std::string dset_name = mapping_text(H5Pget_virtual_dsetname, dcpl.get(), i);
    if (file_name.empty() || dset_name.empty() || file_name.find('%') != std::string::npos ||
        dset_name.find('%') != std::string::npos)
      return {};
    H5Id vspace(H5Pget_virtual_vspace(dcpl.get(), i)), src(H5Pget_virtual_srcspace(dcpl.get(), i));
    RowSource r;
    if (!vspace.valid() || !src.valid() ||
        !selects_whole_rows(vspace.get(), dims, &r.first, &r.rows))
      break;
    // require_virtual_sources found every source: one that cannot be opened now (moved since,
    // or no file descriptor left) would be read by HDF5 as zeros, so it ends the run here.
    std::string why;
    const std::string path = file_name == "."
                                 ? vds_path
                                 : find_linked_file(file_name, vds_path, "HDF5_VDS_PREFIX", &why);
    const std::string rows = what + ": rows " + std::to_string(r.first) + "-" +
                             std::to_string(r.first + r.rows - 1) + " come from " + file_name +
                             ":" + dset_name + ", and ";
    if (path.empty()) throw UsageError(rows + why);
    try {
      r.file = open_h5_readonly(path);
    } catch (const UsageError& e) {
      throw UsageError(rows + e.what());
    }
    r.dset = H5Id(H5Dopen2(r.file.get(), dset_name.c_str(), H5P_DEFAULT));
    if (!r.dset.valid())
      throw UsageError(rows + path + " holds no dataset " + dset_name + " (" + hdf5_error_text() +
                       ")");
    H5Id src_type(H5Dget_type(r.dset.get()));
    r.dims = h5_read::dims_of(r.dset.get());
    int64_t src_rows = 0;
    if (!src_type.valid() || H5Tequal(src_type.get(), type.get()) <= 0 ||
        r.dims.size() != dims.size() ||
        !std::equal(dims.begin() + 1, dims.end(), r.dims.begin() + 1) ||
        !selects_whole_rows(src.get(), r.dims, &r.src_first, &src_rows) || src_rows != r.rows)
      break;
    if (chunk_cache_bytes > 0) {
      // The cache shared out: as many chunks held as one file of all the rows would hold, and
      // at least one chunk (a cache smaller than a chunk holds none: each row read would
      // decompress its chunk again).
      H5Id dapl = h5_read::chunk_cache_access(
          r.dset.get(), std::max(chunk_cache_bytes / static_cast<int64_t>(count),
                                 h5_read::chunk_bytes(r.dset.get())));
      r.dset.reset();  // a dataset still open keeps the cache it was first opened with
      r.dset = H5Id(LS_CHECK_HDF5(H5Dopen2(r.file.get(), dset_name.c_str(), dapl.get())));
    }
    r.space = H5Id(LS_CHECK_HDF5(H5Dget_space(r.dset.get())));
    r.what = path + ": " + dset_name;
    found.push_back(std::move(r));
  }
  hdf5_error_text();
  if (found.size() != count) return {};
  std::sort(found.begin(), found.end(),
            [](const RowSource& a, const RowSource& b) { return a.first < b.first; });
  int64_t next = 0;
  for (const RowSource& r : found) {
    if (r.first != next) return {};  // a gap (rows read as the fill value) or an overlap
    next += r.rows;
  }
  if (next != dims[0]) return {};
  return found;
}

}  // namespace lockstep
