#include "runtime/comm/replica_check.h"

#include <cstdint>

#include "runtime/base/error.h"

namespace lockstep {
namespace {

uint64_t fnv1a(const void* data, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

}  // namespace

void check_replicas(Communicator& comm, const std::vector<float>& params, const std::string& when) {
  int64_t mine = static_cast<int64_t>(fnv1a(params.data(), params.size() * sizeof(float)));
  std::vector<int64_t> all(static_cast<size_t>(comm.size()));
  comm.all_gather(&mine, all.data(), 1, DType::i64);
  std::string bad;
  for (size_t r = 1; r < all.size(); ++r)
    if (all[r] != all[0]) {
      if (!bad.empty()) bad += ", ";
      bad += std::to_string(r);
    }
  if (!bad.empty())
    throw Error("replica check failed " + when + ": the parameters of rank(s) " + bad +
                " differ from rank 0's (checksums of the flat parameter buffer disagree); the "
                "ranks no longer train the same model");
}

}  // namespace lockstep
