// Counts the blocking device-to-host reads this process issues: every `.item()` (ATen's
// _local_scalar_dense, whatever the device) and every explicit wait for the device. On a GPU
// each one drains the queue the host is trying to keep full, so an ordinary training step
// should issue none. Device-agnostic: a RecordFunction callback, so
// CPU runs count the same call sites a GPU run would block on.
#pragma once

#include <cstdint>

namespace rcl {

class HostReadCounter {
 public:
  HostReadCounter();  // starts counting; one counter at a time
  ~HostReadCounter();
  HostReadCounter(const HostReadCounter&) = delete;
  HostReadCounter& operator=(const HostReadCounter&) = delete;
  int64_t count() const;
};

// Explicit waits for the device (stream synchronize) call this so the counter sees them.
void note_device_wait();

}  // namespace rcl
