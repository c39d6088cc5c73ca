// Bootstrap: rank, size, local rank and local size for ranks started on one host.
#include <gtest/gtest.h>
#include <mpi.h>

#include <string>

#include "runtime/base/error.h"
#include "runtime/process/bootstrap.h"

using namespace lockstep;

TEST(Bootstrap, LocalRanksOnOneHost) {
  World w = discover_world();
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  EXPECT_EQ(size, w.size);
  EXPECT_GE(w.rank, 0);
  EXPECT_LT(w.rank, w.size);
  // mpiexec starts every rank on this host: local numbering equals the global one.
  EXPECT_EQ(w.rank, w.local_rank);
  EXPECT_EQ(w.size, w.local_size);
  EXPECT_FALSE(w.host.empty());
  // Every rank names the same host.
  char host[256] = {};
  if (w.rank == 0) w.host.copy(host, sizeof(host) - 1);
  MPI_Bcast(host, sizeof(host), MPI_CHAR, 0, MPI_COMM_WORLD);
  EXPECT_EQ(std::string(host), w.host);
  EXPECT_NE(rank_prefix().find("[rank " + std::to_string(w.rank) + "/" + std::to_string(w.size)),
            std::string::npos);
}
