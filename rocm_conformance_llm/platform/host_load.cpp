#include "rocm_conformance_llm/platform/host_load.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <string>

namespace rcl {

HostLoadMeter::HostLoadMeter() : start_(read()) {}

HostLoadMeter::Counters HostLoadMeter::read() {
  Counters c;
  c.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  // "cpu  user nice system idle iowait irq softirq steal guest guest_nice" (guest time is
  // already inside user); idle and iowait are the only times no one used a core.
  std::ifstream stat("/proc/stat");
  std::string label;
  int64_t ticks[8];
  if (stat >> label && label == "cpu" &&
      stat >> ticks[0] >> ticks[1] >> ticks[2] >> ticks[3] >> ticks[4] >> ticks[5] >> ticks[6] >> ticks[7]) {
    c.total_ticks = 0;
    for (int64_t t : ticks) c.total_ticks += t;
    c.busy_ticks = c.total_ticks - ticks[3] - ticks[4];
  }
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) == 0)
    c.own_cpu_s = double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
                  double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) * 1e-6;
  // "exec_runtime_ns run_delay_ns timeslices" of the calling thread.
  std::ifstream schedstat("/proc/thread-self/schedstat");
  int64_t runtime_ns = 0, delay_ns = 0;
  if (schedstat >> runtime_ns >> delay_ns) c.run_delay_ns = delay_ns;
  return c;
}

HostLoadSample HostLoadMeter::sample() const {
  const Counters now = read();
  HostLoadSample s;
  s.wall_s = now.wall_s - start_.wall_s;
  const int64_t total = now.total_ticks - start_.total_ticks;
  if (start_.total_ticks >= 0 && now.total_ticks >= 0 && total > 0) {
    const double own_ticks = (now.own_cpu_s - start_.own_cpu_s) * double(sysconf(_SC_CLK_TCK));
    const double others = double(now.busy_ticks - start_.busy_ticks) - own_ticks;
    s.others_cpu_share = std::clamp(others / double(total), 0.0, 1.0);
  }
  if (start_.run_delay_ns >= 0 && now.run_delay_ns >= 0)
    s.run_queue_wait_s = double(std::max<int64_t>(0, now.run_delay_ns - start_.run_delay_ns)) * 1e-9;
  return s;
}

}  // namespace rcl
