// lockstep-data join SHARD... --out FILE: one dataset file over shard files written apart (by
// parallel jobs, one file a day), without copying them: every dataset of every top-level group of
// the first shard becomes an HDF5 virtual dataset whose rows are the shards' rows in the order
// given. The shards must hold the same groups and datasets, of the same type and row shape, and
// agree on the attributes the loader reads (a shard normalised or labelled otherwise would be read
// as the first one is); the other attributes are copied from the first shard. Source names are
// stored relative to FILE's folder, so the folder can move as a whole; the loader checks every
// source before training (runtime/data/h5_sources.h).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "apps/data_commands.h"
#include "runtime/base/error.h"
#include "runtime/data/h5_read.h"
#include "runtime/data/h5_writer.h"
#include "runtime/data/hdf5_util.h"

namespace lockstep::data {
namespace {

namespace po = boost::program_options;
namespace fs = std::filesystem;

// The attributes the loader reads (dataset.h), on the file, a group or a dataset: shards that
// differ in one would be read as the first shard says.
constexpr const char* kLoaderAttributes[] = {"num_classes", "norm_scale", "norm_mean",
                                             "norm_std",    "vocab_size", "seq_len"};

// Names of the links directly in `loc` whose objects are of `type`, in name order.
std::vector<std::string> children(hid_t loc, H5I_type_t type) {
  Hdf5Lock lock;
  std::vector<std::string> names;
  H5G_info_t info;
  LS_CHECK_HDF5(H5Gget_info(loc, &info));
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    const ssize_t n =
        H5Lget_name_by_idx(loc, ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    if (n < 0) continue;
    std::string name(static_cast<size_t>(n) + 1, '\0');
    H5Lget_name_by_idx(loc, ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size(),
                       H5P_DEFAULT);
    name.resize(static_cast<size_t>(n));
    const hid_t object = H5Oopen(loc, name.c_str(), H5P_DEFAULT);
    if (object < 0) continue;  // a dangling link: not a split's part
    if (H5Iget_type(object) == type) names.push_back(name);
    H5Oclose(object);
  }
  hdf5_error_text();
  return names;
}

// A dataset's extent in HDF5's own type, for the dataspaces made from it.
std::vector<hsize_t> extent(hid_t dset) {
  const std::vector<int64_t> dims = h5_read::dims_of(dset);
  return std::vector<hsize_t>(dims.begin(), dims.end());
}

std::string shape_text(const std::vector<hsize_t>& dims) {
  return h5_read::shape_text(std::vector<int64_t>(dims.begin(), dims.end()));
}

// Every attribute of `from` written on `to` as it is stored (type and shape kept).
void copy_attributes(hid_t from, hid_t to) {
  Hdf5Lock lock;
  std::vector<std::string> names;
  hsize_t idx = 0;
  LS_CHECK_HDF5(H5Aiterate2(
      from, H5_INDEX_NAME, H5_ITER_INC, &idx,
      [](hid_t, const char* name, const H5A_info_t*, void* out) -> herr_t {
        static_cast<std::vector<std::string>*>(out)->emplace_back(name);
        return 0;
      },
      &names));
  for (const std::string& name : names) {
    H5Id attr(LS_CHECK_HDF5(H5Aopen(from, name.c_str(), H5P_DEFAULT)));
    H5Id type(LS_CHECK_HDF5(H5Aget_type(attr.get())));
    H5Id space(LS_CHECK_HDF5(H5Aget_space(attr.get())));
    const hssize_t points = H5Sget_simple_extent_npoints(space.get());
    std::vector<unsigned char> buf(static_cast<size_t>(std::max<hssize_t>(points, 1)) *
                                   H5Tget_size(type.get()));
    LS_CHECK_HDF5(H5Aread(attr.get(), type.get(), buf.data()));
    H5Id copy(LS_CHECK_HDF5(
        H5Acreate2(to, name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT)));
    const herr_t written = H5Awrite(copy.get(), type.get(), buf.data());
    // Variable-length strings were read as pointers HDF5 allocated.
    if (H5Tdetect_class(type.get(), H5T_VLEN) > 0 || H5Tis_variable_str(type.get()) > 0)
      H5Dvlen_reclaim(type.get(), space.get(), H5P_DEFAULT, buf.data());
    LS_CHECK_HDF5(written);
  }
}

// Refuses a shard whose loader attribute on `obj` (what: "", "train", "train/images") differs
// from the first shard's on `first`.
void require_same_loader_attributes(hid_t first, hid_t obj, const std::string& first_path,
                                    const std::string& path, const std::string& what) {
  for (const char* name : kLoaderAttributes) {
    const auto a = read_h5_attr_doubles(first, name), b = read_h5_attr_doubles(obj, name);
    if (a == b) continue;
    const auto text = [](const std::optional<std::vector<double>>& v) {
      if (!v) return std::string("none");
      std::ostringstream s;
      s.precision(10);
      for (size_t i = 0; i < v->size(); ++i) s << (i ? ", " : "") << (*v)[i];
      return s.str();
    };
    throw UsageError(path + ": attribute " + name + (what.empty() ? "" : " of " + what) + " is " +
                     text(b) + " where " + first_path + " has " + text(a) +
                     ": the joined file would read every shard as the first says; write the "
                     "shards alike");
  }
}

// The name HDF5 is to look for `shard` by, from the joined file in folder `dir`: relative where
// both are under one root, so that the folder can move as a whole.
std::string source_name(const std::string& shard, const fs::path& dir) {
  std::error_code ec;
  const fs::path abs = fs::absolute(shard, ec).lexically_normal();
  const fs::path rel = abs.lexically_relative(fs::absolute(dir, ec).lexically_normal());
  return rel.empty() ? abs.string() : rel.string();
}

}  // namespace

int run_join(int argc, char** argv, const World& world) {
  std::vector<std::string> inputs;
  std::string out;
  po::options_description opts("join options");
  // clang-format off
  opts.add_options()
      ("in,i", po::value(&inputs)->multitoken()->required(),
       "shard files, their rows joined in this order (also given without --in)")
      ("out,o", po::value(&out)->required(),
       "HDF5 file of virtual datasets over the shards (replaced if it exists)");
  // clang-format on
  Parsed p = parse_options("join", argc, argv, opts, "in", world, true);
  if (p.help_shown) return 0;
  require_one_process("join", world);
  const std::string temp = temp_path_for(out, inputs);
  std::vector<H5Id> shards;
  for (const std::string& in : inputs) shards.push_back(open_h5_readonly(in));
  const hid_t first = shards[0].get();
  const fs::path dir =
      fs::path(out).parent_path().empty() ? fs::path(".") : fs::path(out).parent_path();

  Hdf5Lock lock;
  std::string summary;
  TempFile guard(temp);
  {
    H5Id file = create_h5_file(temp);
    copy_attributes(first, file.get());
    for (size_t s = 1; s < shards.size(); ++s)
      require_same_loader_attributes(first, shards[s].get(), inputs[0], inputs[s], "");
    const std::vector<std::string> groups = children(first, H5I_GROUP);
    if (groups.empty()) throw UsageError(inputs[0] + ": holds no group (train/, test/) to join");
    for (size_t s = 1; s < shards.size(); ++s)
      if (children(shards[s].get(), H5I_GROUP) != groups)
        throw UsageError(inputs[s] + ": its groups are not " + inputs[0] +
                         "'s (the shards must hold the same splits)");
    for (const std::string& g : groups) {
      std::vector<H5Id> in_group;
      for (H5Id& shard : shards)
        in_group.emplace_back(LS_CHECK_HDF5(H5Gopen2(shard.get(), g.c_str(), H5P_DEFAULT)));
      H5Id group = ensure_h5_group(file.get(), g);
      copy_attributes(in_group[0].get(), group.get());
      const std::vector<std::string> names = children(in_group[0].get(), H5I_DATASET);
      for (size_t s = 1; s < shards.size(); ++s) {
        require_same_loader_attributes(in_group[0].get(), in_group[s].get(), inputs[0], inputs[s],
                                       g);
        if (children(in_group[s].get(), H5I_DATASET) != names)
          throw UsageError(inputs[s] + ": the datasets of " + g + "/ are not " + inputs[0] + "'s");
      }
      std::string rows_text;
      for (const std::string& d : names) {
        const std::string what = g + "/" + d;
        std::vector<H5Id> dsets;
        for (H5Id& grp : in_group)
          dsets.emplace_back(LS_CHECK_HDF5(H5Dopen2(grp.get(), d.c_str(), H5P_DEFAULT)));
        H5Id type(LS_CHECK_HDF5(H5Dget_type(dsets[0].get())));
        std::vector<hsize_t> shape = extent(dsets[0].get());
        if (shape.empty()) throw UsageError(inputs[0] + ": " + what + " is a scalar, not rows");
        std::vector<std::vector<hsize_t>> dims;
        hsize_t rows = 0;
        for (size_t s = 0; s < shards.size(); ++s) {
          dims.push_back(extent(dsets[s].get()));
          H5Id t(LS_CHECK_HDF5(H5Dget_type(dsets[s].get())));
          const bool same_rows = dims[s].size() == shape.size() &&
                                 std::equal(shape.begin() + 1, shape.end(), dims[s].begin() + 1);
          if (H5Tequal(t.get(), type.get()) <= 0 || !same_rows)
            throw UsageError(inputs[s] + ": " + what + " has shape " + shape_text(dims[s]) +
                             ", rows unlike those of " + inputs[0] + "'s " + shape_text(shape) +
                             " (the shards must hold rows of one shape and type)");
          if (s > 0)
            require_same_loader_attributes(dsets[0].get(), dsets[s].get(), inputs[0], inputs[s],
                                           what);
          rows += dims[s][0];
        }
        shape[0] = rows;
        H5Id vspace(
            LS_CHECK_HDF5(H5Screate_simple(static_cast<int>(shape.size()), shape.data(), nullptr)));
        H5Id dcpl(LS_CHECK_HDF5(H5Pcreate(H5P_DATASET_CREATE)));
        hsize_t at = 0;
        for (size_t s = 0; s < shards.size(); ++s) {
          if (dims[s][0] == 0) continue;
          std::vector<hsize_t> start(shape.size(), 0), count = dims[s];
          start[0] = at;
          LS_CHECK_HDF5(H5Sselect_hyperslab(vspace.get(), H5S_SELECT_SET, start.data(), nullptr,
                                            count.data(), nullptr));
          H5Id src(LS_CHECK_HDF5(
              H5Screate_simple(static_cast<int>(dims[s].size()), dims[s].data(), nullptr)));
          LS_CHECK_HDF5(H5Pset_virtual(dcpl.get(), vspace.get(),
                                       source_name(inputs[s], dir).c_str(), ("/" + what).c_str(),
                                       src.get()));
          at += dims[s][0];
        }
        LS_CHECK_HDF5(H5Sselect_all(vspace.get()));
        H5Id joined(LS_CHECK_HDF5(H5Dcreate2(group.get(), d.c_str(), type.get(), vspace.get(),
                                             H5P_DEFAULT, dcpl.get(), H5P_DEFAULT)));
        copy_attributes(dsets[0].get(), joined.get());
        if (rows_text.empty()) rows_text = std::to_string(rows) + " rows";
      }
      summary += (summary.empty() ? "" : ", ") + g + " " +
                 (rows_text.empty() ? std::string("no datasets") : rows_text);
    }
    close_h5_file(file, temp);
  }
  guard.commit(out);
  std::printf(
      "wrote %s: virtual datasets over %zu file(s): %s; the shards stay where they are (read "
      "through %s, which names them relative to its folder)\n",
      out.c_str(), inputs.size(), summary.c_str(), out.c_str());
  return 0;
}

}  // namespace lockstep::data
