#include "runtime/data/h5_sources.h"

#include <sys/resource.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "runtime/base/error.h"
#include "runtime/data/h5_filters.h"
#include "runtime/data/h5_read.h"
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

// The file HDF5 reads for a source named `name` in the file at `here` (h5_sources.h: the name as
// written, under each prefix of `prefix_env`, in `here`'s folder), or "" when none of those places
// holds a file; then "that file cannot be found (looked for ...)".
std::string find_source(const std::string& name, const std::string& here, const char* prefix_env,
                        std::string* missing) {
  const fs::path written(name), origin = fs::path(here).parent_path();
  const fs::path tail = written.is_absolute() ? written.filename() : written;
  std::vector<fs::path> places{written};
  if (const char* env = std::getenv(prefix_env); env != nullptr) {
    const std::string prefixes = env;
    for (size_t at = 0; at <= prefixes.size();) {
      size_t end = prefixes.find(':', at);
      if (end == std::string::npos) end = prefixes.size();
      std::string prefix = prefixes.substr(at, end - at);
      if (const size_t o = prefix.find("${ORIGIN}"); o != std::string::npos)
        prefix.replace(o, 9, origin.empty() ? "." : origin.string());
      if (!prefix.empty()) places.push_back(fs::path(prefix) / tail);
      at = end + 1;
    }
  }
  places.push_back((origin.empty() ? fs::path(".") : origin) / tail);
  std::vector<fs::path> seen;
  std::string looked;
  for (const fs::path& p : places) {
    std::error_code ec;
    if (fs::is_regular_file(p, ec)) return p.string();
    const fs::path place = fs::absolute(p, ec).lexically_normal();
    if (std::find(seen.begin(), seen.end(), place) != seen.end()) continue;
    seen.push_back(place);
    looked += (looked.empty() ? "" : ", ") + place.string();
  }
  *missing = "that file cannot be found (looked for " + looked + "; " + prefix_env +
             " names other folders)";
  return "";
}

// Why the rows mapped from `file_name`:`dset_name` (the source selection `src`, placed at the
// virtual selection `vspace`) would be read as fill values, or "" when HDF5 can read them.
std::string source_problem(const std::string& file_name, const std::string& dset_name, hid_t src,
                           hid_t vspace, const std::string& vds_path) {
  std::string missing;
  const std::string path =
      file_name == "." ? vds_path : find_source(file_name, vds_path, "HDF5_VDS_PREFIX", &missing);
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

// The object `name` in `loc`, opened as whatever it is; invalid (the error stack cleared) when
// HDF5 cannot.
H5Id open_object(hid_t loc, const std::string& name) {
  const hid_t id = H5Oopen(loc, name.c_str(), H5P_DEFAULT);
  if (id < 0) hdf5_error_text();
  return H5Id(id);
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

std::string external_link_problem(hid_t loc, const std::string& name) {
  Hdf5Lock lock;
  H5L_info_t info;
  if (H5Lget_info(loc, name.c_str(), &info, H5P_DEFAULT) < 0) {
    hdf5_error_text();
    return "";
  }
  if (info.type != H5L_TYPE_EXTERNAL) return "";
  std::vector<char> value(info.u.val_size + 1, '\0');
  const char* file_name = nullptr;
  const char* object = nullptr;
  unsigned flags = 0;
  if (H5Lget_val(loc, name.c_str(), value.data(), value.size(), H5P_DEFAULT) < 0 ||
      H5Lunpack_elink_val(value.data(), info.u.val_size, &flags, &file_name, &object) < 0) {
    hdf5_error_text();
    return "";
  }
  if (open_object(loc, name).valid()) return "";
  const std::string link = "'" + name + "' is an external link to " + file_name + ":" + object;
  std::string here(static_cast<size_t>(std::max<ssize_t>(H5Fget_name(loc, nullptr, 0), 0)) + 1,
                   '\0');
  H5Fget_name(loc, here.data(), here.size());
  here.resize(std::strlen(here.c_str()));
  std::string missing;
  const std::string path = find_source(file_name, here, "HDF5_EXT_PREFIX", &missing);
  if (path.empty()) return link + ", and " + missing;
  try {
    H5Id other = open_h5_readonly(path);
    if (!open_object(other.get(), object).valid())
      return link + ", and that file holds no " + object;
  } catch (const UsageError& e) {
    return link + ", and " + e.what();
  }
  return link + ", which HDF5 cannot follow";
}

void require_written(hid_t dset, const std::string& what) {
  Hdf5Lock lock;
  H5Id dcpl(LS_CHECK_HDF5(H5Dget_create_plist(dset)));
  H5Id space(LS_CHECK_HDF5(H5Dget_space(dset)));
  const int rank = LS_CHECK_HDF5(H5Sget_simple_extent_ndims(space.get()));
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  LS_CHECK_HDF5(H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr));
  hsize_t elements = 1;
  for (hsize_t d : dims) elements *= d;
  if (elements == 0) return;
  // A fill value the writer chose says what unwritten rows hold (a deliberately sparse file);
  // HDF5's default one says nothing.
  H5D_fill_value_t fill_kind = H5D_FILL_VALUE_DEFAULT;
  LS_CHECK_HDF5(H5Pfill_value_defined(dcpl.get(), &fill_kind));
  if (fill_kind == H5D_FILL_VALUE_USER_DEFINED) return;
  const std::string fill =
      " (HDF5 reads storage that was never written as zeros, without an "
      "error: was the writer stopped early? write every row, or give the "
      "dataset a fill value of its own, h5py's fillvalue=, where unwritten "
      "rows are meant to read as it)";
  const H5D_layout_t layout = H5Pget_layout(dcpl.get());
  if (layout == H5D_CONTIGUOUS) {
    H5D_space_status_t status;
    LS_CHECK_HDF5(H5Dget_space_status(dset, &status));
    if (status == H5D_SPACE_STATUS_NOT_ALLOCATED)
      throw UsageError(what + ": was never written" + fill);
    return;
  }
  if (layout != H5D_CHUNKED) return;
  std::vector<hsize_t> chunk(static_cast<size_t>(rank)), grid(chunk.size());
  LS_CHECK_HDF5(H5Pget_chunk(dcpl.get(), rank, chunk.data()));
  hsize_t needed = 1;
  for (size_t d = 0; d < chunk.size(); ++d) {
    grid[d] = (dims[d] + chunk[d] - 1) / chunk[d];
    needed *= grid[d];
  }
  hsize_t allocated = 0;
  LS_CHECK_HDF5(H5Dget_num_chunks(dset, space.get(), &allocated));
  if (allocated >= needed) return;
  // The first chunk along the rows that is missing: the allocated chunks' first rows, each row
  // block counted once per chunk of the other dimensions. Listing them costs a call a chunk, so
  // only up to a bound; past it the count alone is said.
  std::string rows;
  constexpr hsize_t kListed = 1 << 16;
  if (allocated <= kListed) {
    const hsize_t per_block = needed / grid[0];
    std::vector<hsize_t> in_block(grid[0], 0), offset(chunk.size());
    for (hsize_t i = 0; i < allocated; ++i) {
      unsigned mask = 0;
      haddr_t addr = 0;
      hsize_t size = 0;
      LS_CHECK_HDF5(H5Dget_chunk_info(dset, space.get(), i, offset.data(), &mask, &addr, &size));
      ++in_block[offset[0] / chunk[0]];
    }
    for (hsize_t b = 0; b < grid[0]; ++b)
      if (in_block[b] < per_block) {
        rows = ", the first at rows " + std::to_string(b * chunk[0]) + "-" +
               std::to_string(std::min(dims[0], (b + 1) * chunk[0]) - 1);
        break;
      }
  }
  throw UsageError(what + ": " + std::to_string(needed - allocated) + " of its " +
                   std::to_string(needed) + " chunks were never written" + rows + fill);
}

void require_external_files(hid_t dset, const std::string& h5_path, const std::string& what) {
  Hdf5Lock lock;
  H5Id dcpl(LS_CHECK_HDF5(H5Dget_create_plist(dset)));
  const int count = H5Pget_external_count(dcpl.get());
  if (count <= 0) {
    hdf5_error_text();
    return;
  }
  // Where HDF5 1.10 looks: under HDF5_EXTFILE_PREFIX, else the dataset's efile prefix, else from
  // the current folder ("${ORIGIN}" is the HDF5 file's folder).
  std::string prefix;
  if (const char* env = std::getenv("HDF5_EXTFILE_PREFIX"); env != nullptr) {
    prefix = env;
  } else {
    H5Id dapl(LS_CHECK_HDF5(H5Dget_access_plist(dset)));
    const ssize_t n = H5Pget_efile_prefix(dapl.get(), nullptr, 0);
    if (n > 0) {
      prefix.assign(static_cast<size_t>(n) + 1, '\0');
      H5Pget_efile_prefix(dapl.get(), prefix.data(), prefix.size());
      prefix.resize(static_cast<size_t>(n));
    }
  }
  const fs::path origin = fs::path(h5_path).parent_path();
  if (const size_t o = prefix.find("${ORIGIN}"); o != std::string::npos)
    prefix.replace(o, 9, origin.empty() ? "." : origin.string());
  const std::vector<int64_t> dims = h5_read::dims_of(dset);
  H5Id type(LS_CHECK_HDF5(H5Dget_type(dset)));
  uint64_t row_bytes = H5Tget_size(type.get()), total = 0;
  for (size_t d = 1; d < dims.size(); ++d) row_bytes *= static_cast<uint64_t>(dims[d]);
  total = dims.empty() ? row_bytes : row_bytes * static_cast<uint64_t>(dims[0]);
  uint64_t covered = 0;
  for (int i = 0; i < count && covered < total; ++i) {
    char name[4096] = {};
    off_t offset = 0;
    hsize_t size = 0;
    LS_CHECK_HDF5(H5Pget_external(dcpl.get(), static_cast<unsigned>(i), sizeof name - 1, name,
                                  &offset, &size));
    const uint64_t take = std::min<uint64_t>(size, total - covered);
    const fs::path path =
        prefix.empty() || fs::path(name).is_absolute() ? fs::path(name) : fs::path(prefix) / name;
    const auto rows = [&](uint64_t from) {
      return "rows " + std::to_string(from / std::max<uint64_t>(row_bytes, 1)) + "-" +
             std::to_string((covered + take - 1) / std::max<uint64_t>(row_bytes, 1));
    };
    std::error_code ec;
    const uint64_t have = fs::file_size(path, ec);
    if (ec) {
      const fs::path beside = (origin.empty() ? fs::path(".") : origin) / name;
      std::error_code ec2;
      const bool there = prefix.empty() && fs::is_regular_file(beside, ec2);
      throw UsageError(
          what + ": its " + rows(covered) + " are stored in the raw data file " + name +
          ", which cannot be found (looked for " + fs::absolute(path, ec2).string() +
          (prefix.empty() ? ": HDF5 looks for a dataset's external files from the current folder"
                          : ": under HDF5_EXTFILE_PREFIX or the dataset's prefix") +
          ")" +
          (there ? "; it lies beside " + h5_path +
                       ": set HDF5_EXTFILE_PREFIX='${ORIGIN}' to have HDF5 look there"
                 : ""));
    }
    const uint64_t end = static_cast<uint64_t>(offset) + take;
    if (have < end)
      throw UsageError(
          what + ": its " +
          rows(covered +
               (have > static_cast<uint64_t>(offset) ? have - static_cast<uint64_t>(offset) : 0)) +
          " are stored in the raw data file " + path.string() + " up to byte " +
          std::to_string(end) + ", but it holds " + std::to_string(have) +
          " bytes: HDF5 would read the rest as zeros, without an error (the file "
          "was cut short?)");
    covered += take;
  }
}

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
    const std::string path =
        file_name == "." ? vds_path : find_source(file_name, vds_path, "HDF5_VDS_PREFIX", &why);
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
