// A communicator of one rank for tests: every collective is a copy, so a Trainer, a StepGuard or an
// agreement on it involves this process alone, whatever the MPI world around it. `device_buffers`
// makes it claim device buffers, as NCCL does, to test the refusals. Header-only.
#pragma once

#include <cstring>
#include <memory>

#include "runtime/base/communicator.h"

namespace lockstep::testing_util {

class SoloCommunicator : public Communicator {
 public:
  explicit SoloCommunicator(bool device_buffers = false) : device_buffers_(device_buffers) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  Backend backend() const override { return Backend::mpi; }
  bool device_buffers() const override { return device_buffers_; }
  WorkHandle all_reduce_async(const void* send, void* recv, size_t count, DType type,
                              ReduceOp) override {
    return copy(send, recv, count * dtype_size(type));
  }
  WorkHandle broadcast_async(void*, size_t, DType, int) override { return done(); }
  WorkHandle all_gather_async(const void* send, void* recv, size_t count, DType type) override {
    return copy(send, recv, count * dtype_size(type));
  }
  WorkHandle reduce_scatter_async(const void* send, void* recv, size_t count, DType type,
                                  ReduceOp) override {
    return copy(send, recv, count * dtype_size(type));
  }
  WorkHandle barrier_async() override { return done(); }

 protected:
  struct Done : Work {
    void wait(Millis) override {}
    bool done() override { return true; }
  };
  static WorkHandle done() { return std::make_unique<Done>(); }

 private:
  static WorkHandle copy(const void* send, void* recv, size_t bytes) {
    if (send != recv) std::memcpy(recv, send, bytes);
    return done();
  }
  bool device_buffers_;
};

}  // namespace lockstep::testing_util
