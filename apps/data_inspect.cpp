// lockstep-data inspect FILE: every group and dataset of an HDF5 file (shape, type, layout,
// chunking, filters, stored size) with their attributes, then, for each split the loader could
// use (a group holding images/labels, x/y or tokens), what the loader sees or why it would refuse
// it: for a token split (lockstep-data text) its sequences, length and vocabulary. Exit 0 when
// every such split is usable, 2 when one is refused or there is none.
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "apps/data_commands.h"
#include "runtime/base/error.h"
#include "runtime/base/exit.h"
#include "runtime/data/dataset.h"
#include "runtime/data/h5_filters.h"
#include "runtime/data/h5_read.h"
#include "runtime/data/h5_writer.h"
#include "runtime/data/hdf5_util.h"

namespace lockstep::data {
namespace {

namespace po = boost::program_options;

constexpr size_t kShownValues = 10;

std::string dims_text(const std::vector<hsize_t>& d) {
  std::string s = "(";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + (d.size() == 1 ? ",)" : ")");
}

std::string type_text(hid_t type) {
  const size_t bytes = H5Tget_size(type);
  switch (H5Tget_class(type)) {
    case H5T_INTEGER:
      return (H5Tget_sign(type) == H5T_SGN_NONE ? "uint" : "int") + std::to_string(bytes * 8);
    case H5T_FLOAT: return "float" + std::to_string(bytes * 8);
    case H5T_STRING:
      return H5Tis_variable_str(type) > 0 ? "string" : "string[" + std::to_string(bytes) + "]";
    case H5T_COMPOUND: return "compound";
    case H5T_ENUM: return h5_read::type_text(type);  // "enum of int8": the values the loader reads
    case H5T_ARRAY: return "array";
    default: return "other";
  }
}

std::string attr_value(hid_t obj, const std::string& name) {
  H5Id attr(LS_CHECK_HDF5(H5Aopen(obj, name.c_str(), H5P_DEFAULT)));
  H5Id type(LS_CHECK_HDF5(H5Aget_type(attr.get())));
  const H5T_class_t cls = H5Tget_class(type.get());
  std::ostringstream os;
  os.precision(6);
  if (cls == H5T_INTEGER || cls == H5T_FLOAT) {
    std::vector<double> v = *read_h5_attr_doubles(obj, name);
    if (v.size() != 1) os << "[";
    for (size_t i = 0; i < v.size() && i < kShownValues; ++i) os << (i ? ", " : "") << v[i];
    if (v.size() > kShownValues) os << ", ... " << v.size() << " values";
    if (v.size() != 1) os << "]";
  } else if (cls == H5T_STRING) {
    std::vector<std::string> v = *read_h5_attr_strings(obj, name);
    if (v.size() != 1) os << "[";
    for (size_t i = 0; i < v.size() && i < kShownValues; ++i)
      os << (i ? ", " : "") << '"' << v[i] << '"';
    if (v.size() > kShownValues) os << ", ... " << v.size() << " strings";
    if (v.size() != 1) os << "]";
  } else {
    os << "<" << type_text(type.get()) << ">";
  }
  return os.str();
}

herr_t collect_attr(hid_t, const char* name, const H5A_info_t*, void* data) {
  static_cast<std::vector<std::string>*>(data)->emplace_back(name);
  return 0;
}

void print_attrs(hid_t obj, const std::string& indent) {
  std::vector<std::string> names;
  hsize_t idx = 0;
  LS_CHECK_HDF5(H5Aiterate2(obj, H5_INDEX_NAME, H5_ITER_INC, &idx, collect_attr, &names));
  for (const auto& n : names)
    std::printf("%s@%s = %s\n", indent.c_str(), n.c_str(), attr_value(obj, n).c_str());
}

std::string layout_text(hid_t dset) {
  H5Id dcpl(LS_CHECK_HDF5(H5Dget_create_plist(dset)));
  std::string s;
  switch (H5Pget_layout(dcpl.get())) {
    case H5D_CHUNKED: {
      hsize_t dims[H5S_MAX_RANK] = {};
      const int rank = LS_CHECK_HDF5(H5Pget_chunk(dcpl.get(), H5S_MAX_RANK, dims));
      s = "chunked " + dims_text(std::vector<hsize_t>(dims, dims + rank));
      break;
    }
    case H5D_CONTIGUOUS: s = "contiguous"; break;
    case H5D_COMPACT: s = "compact"; break;
    default: s = "virtual"; break;
  }
  const std::string filters = h5_filters_text(dset);
  if (!filters.empty()) s += ", " + filters;
  return s;
}

void print_dataset(hid_t dset, const std::string& path) {
  H5Id type(LS_CHECK_HDF5(H5Dget_type(dset)));
  H5Id space(LS_CHECK_HDF5(H5Dget_space(dset)));
  const int rank = LS_CHECK_HDF5(H5Sget_simple_extent_ndims(space.get()));
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  if (rank > 0) LS_CHECK_HDF5(H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr));
  double logical = static_cast<double>(H5Tget_size(type.get()));
  for (hsize_t d : dims) logical *= static_cast<double>(d);
  const double stored = static_cast<double>(H5Dget_storage_size(dset));
  std::printf("%s  %s %s  %s  %.2f MB stored", path.c_str(), type_text(type.get()).c_str(),
              rank == 0 ? "scalar" : dims_text(dims).c_str(), layout_text(dset).c_str(),
              stored / 1e6);
  if (stored > 0 && logical > 0)
    std::printf(" (%.0f%% of %.2f MB)", 100.0 * stored / logical, logical / 1e6);
  std::printf("\n");
  print_attrs(dset, "    ");
}

// Prints `group` and everything under it; collects the paths of groups that look like splits.
void walk(hid_t group, const std::string& path, std::vector<std::string>& splits) {
  std::printf("%s  group\n", path.c_str());
  print_attrs(group, "    ");
  if ((h5_has_child(group, "images") && h5_has_child(group, "labels")) ||
      (h5_has_child(group, "x") && h5_has_child(group, "y")) || h5_has_child(group, "tokens"))
    splits.push_back(path);
  H5G_info_t info{};
  LS_CHECK_HDF5(H5Gget_info(group, &info));
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    const ssize_t len = LS_CHECK_HDF5(
        H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT));
    std::string name(static_cast<size_t>(len) + 1, '\0');
    LS_CHECK_HDF5(H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(),
                                     name.size(), H5P_DEFAULT));
    name.resize(static_cast<size_t>(len));
    const std::string child = (path == "/" ? "/" : path + "/") + name;
    const hid_t id = H5Oopen(group, name.c_str(), H5P_DEFAULT);
    if (id < 0) {
      std::printf("%s  (link that does not resolve: %s)\n", child.c_str(),
                  hdf5_error_text().c_str());
      continue;
    }
    H5Id obj(id);
    switch (H5Iget_type(obj.get())) {
      case H5I_GROUP: walk(obj.get(), child, splits); break;
      case H5I_DATASET: print_dataset(obj.get(), child); break;
      default: std::printf("%s  named datatype\n", child.c_str()); break;
    }
  }
}

std::string shape_text(const std::vector<int64_t>& s) {
  std::vector<hsize_t> d(s.begin(), s.end());
  return dims_text(d);
}

// Prints what the loader sees of `split`, or why it refuses it; false for a refusal.
bool print_loader_view(const std::string& file, const std::string& split) {
  DatasetSpec spec;
  spec.path = file;
  spec.group = split;
  try {
    DatasetInfo i = inspect_dataset(spec);
    if (i.positions > 1) {  // a token split (dataset.h)
      const auto t = static_cast<long long>(i.positions);
      std::printf(
          "%s: %lld sequences of %lld tokens (inputs the first %lld, targets the last "
          "%lld), vocabulary %d; %s ids -> float32 as they are, a loss per token%s\n",
          split.c_str(), static_cast<long long>(i.rows), t + 1, t, t, i.num_classes,
          i.x_type.c_str(), byte_level_tokens(i) ? " (and in bits per byte)" : "");
      return true;
    }
    std::printf("%s: %lld rows of %s %s -> float32 (x * %g - %g) / %g; ", split.c_str(),
                static_cast<long long>(i.rows), i.x_type.c_str(),
                shape_text(i.sample_shape).c_str(), i.norm_scale, i.norm_mean, i.norm_std);
    if (i.classification)
      std::printf("%s labels, %d classes\n", i.y_type.c_str(), i.num_classes);
    else
      std::printf("%s regression targets, %d per row\n", i.y_type.c_str(), i.target_dim);
    return true;
  } catch (const UsageError& e) {
    std::printf("%s: not usable by the loader: %s\n", split.c_str(), e.what());
    return false;
  }
}

}  // namespace

int run_inspect(int argc, char** argv, const World& world) {
  std::string file;
  po::options_description opts("inspect options");
  // clang-format off
  opts.add_options()("file", po::value(&file)->required(), "HDF5 file to describe");
  // clang-format on
  Parsed p = parse_options("inspect", argc, argv, opts, "file", world);
  if (p.help_shown) return 0;
  require_one_process("inspect", world);

  Hdf5Lock lock;
  H5Id f = open_h5_readonly(file);
  std::error_code ec;
  const auto bytes = std::filesystem::file_size(file, ec);
  std::printf("%s  HDF5, %.2f MB\n", file.c_str(), ec ? 0.0 : static_cast<double>(bytes) / 1e6);
  H5Id root(LS_CHECK_HDF5(H5Gopen2(f.get(), "/", H5P_DEFAULT)));
  std::vector<std::string> splits;
  walk(root.get(), "/", splits);
  std::printf("\nloader view:\n");
  if (splits.empty()) std::printf("  no group holds images/labels, x/y or tokens\n");
  bool usable = !splits.empty();
  for (const auto& s : splits) {
    const std::string split = s == "/" ? "/" : s.substr(1);
    H5Id g(LS_CHECK_HDF5(H5Gopen2(f.get(), s.c_str(), H5P_DEFAULT)));
    std::printf("  ");
    usable = print_loader_view(file, split) && usable;
  }
  // As the trainer would refuse the file: exit 2 (the description above is printed either way).
  return usable ? 0 : kExitUsage;
}

}  // namespace lockstep::data
