// How much the rest of the host took from a stretch of this process's work (a training step):
// on shared cores a compiler or another job slows the step as surely as a slow kernel, and
// that is not a ROCm fault (checks/detectors/step_time.cpp attributes such steps to the host).
#pragma once

#include <cstdint>

namespace rcl {

struct HostLoadSample {
  // Share of the machine's CPU time (all cores, steal included) that other processes used;
  // -1: /proc/stat unreadable.
  double others_cpu_share = -1;
  // Seconds the calling (training) thread was runnable but waiting for a core (the scheduler's
  // run_delay, /proc/thread-self/schedstat); -1: the kernel does not keep it.
  double run_queue_wait_s = -1;
  double wall_s = 0;
};

// Reads the counters when made; sample() gives what happened since. Linux /proc only; elsewhere
// the fields stay -1 (unknown), never 0 (quiet).
class HostLoadMeter {
 public:
  HostLoadMeter();
  HostLoadSample sample() const;

 private:
  struct Counters {
    int64_t busy_ticks = -1, total_ticks = -1;  // /proc/stat, all CPUs
    double own_cpu_s = 0;                       // this process's user + system time
    int64_t run_delay_ns = -1;
    double wall_s = 0;
  };
  static Counters read();
  Counters start_;
};

}  // namespace rcl
