#include "runtime/data/h5_sources.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "runtime/base/error.h"
#include "runtime/data/h5_read.h"
#include "runtime/data/hdf5_util.h"

namespace lockstep {

namespace {

namespace fs = std::filesystem;

// The object `name` in `loc`, opened as whatever it is; invalid (the error stack cleared) when
// HDF5 cannot.
H5Id open_object(hid_t loc, const std::string& name) {
  const hid_t id = H5Oopen(loc, name.c_str(), H5P_DEFAULT);
  if (id < 0) hdf5_error_text();
  return H5Id(id);
}

}  // namespace

std::string find_linked_file(const std::string& name, const std::string& here,
                             const char* prefix_env, std::string* missing) {
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
  const std::string path = find_linked_file(file_name, here, "HDF5_EXT_PREFIX", &missing);
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

}  // namespace lockstep
