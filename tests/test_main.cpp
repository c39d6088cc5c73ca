// Shared main() for every GoogleTest binary: starts MPI (a world of one without mpiexec) and keeps
// the output readable at P ranks: rank 0 prints the usual report, other ranks print only failures,
// prefixed with their rank. The environment knobs (knobs.h) are read first, as the apps read them,
// so that LOCKSTEP_CPU_ISA=baseline runs a kernels test's baseline builds. The exit code is
// non-zero on any rank that failed.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "runtime/base/error.h"
#include "runtime/base/knobs.h"
#include "runtime/process/bootstrap.h"

namespace {

class FailureOnlyPrinter : public testing::EmptyTestEventListener {
  void OnTestPartResult(const testing::TestPartResult& r) override {
    if (r.failed())
      std::fprintf(stderr, "%s %s:%d: Failure\n%s\n", lockstep::rank_prefix().c_str(),
                   r.file_name() ? r.file_name() : "?", r.line_number(), r.message());
  }
};

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  lockstep::MpiSession session(&argc, &argv);
  lockstep::configured_knobs();
  if (session.world().rank != 0) {
    auto& listeners = testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailureOnlyPrinter);
  }
  int rc = RUN_ALL_TESTS();
  // ctest marks a gpu test skipped when it exits 77 (SKIP_RETURN_CODE): say so when every test of
  // a *_gpu_test or *_gpu_mpi_test binary skipped (no GPU answers) and none failed, instead of a
  // silent "Passed". Every rank gets the same answer, and mpiexec passes the 77 on.
  const testing::UnitTest& unit = *testing::UnitTest::GetInstance();
  std::string program = argc > 0 ? argv[0] : "";
  if (rc == 0 && (program.ends_with("_gpu_test") || program.ends_with("_gpu_mpi_test")) &&
      unit.successful_test_count() == 0 && unit.skipped_test_count() > 0)
    return 77;
  return rc;
}
