// Stands in for device_timer.cu when CUDA is not built: there is no stream to time, and nothing
// makes one (the trainer refuses --device cuda first).
#include "runtime/base/error.h"
#include "runtime/observe/device_timer.h"

namespace lockstep {

struct DeviceTimer::State {};

DeviceTimer::DeviceTimer(cudaStream_t) {
  throw Error("DeviceTimer: this binary was built without CUDA (LOCKSTEP_CUDA=OFF)");
}
DeviceTimer::~DeviceTimer() = default;
int DeviceTimer::record() { return -1; }
void DeviceTimer::record_again(int) {}
bool DeviceTimer::done(int) { return true; }
void DeviceTimer::wait(int) {}
double DeviceTimer::seconds(int) { return 0; }
void DeviceTimer::drop(int) {}
void DeviceTimer::rearm(int) {}
void DeviceTimer::calibrate_if_stale() {}
void DeviceTimer::unpin(int) {}

}  // namespace lockstep
