// The hang watchdog: fires on a stalled heartbeat within the timeout, names what the run was
// doing, attributes collective phases to RCCL, and stays silent while heartbeats flow.
#include <chrono>
#include <future>
#include <thread>

#include <gtest/gtest.h>

#include "rocm_conformance_llm/checks/detectors/catalog.hpp"
#include "rocm_conformance_llm/checks/monitors/watchdog.hpp"

namespace rcl {
namespace {
namespace RCL_UNITY_ID {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
constexpr double kTimeout = 0.3;

struct Fired {
  Finding finding;
  Clock::time_point at;
};

TEST(Watchdog, FiresOnAStalledStepWithWhatTheRunWasDoing) {
  FindingLog log(find_signature);
  std::promise<Fired> fired;
  Watchdog dog(kTimeout, 2, log, [&](const Finding& f) { fired.set_value({f, Clock::now()}); });
  for (int64_t step = 1; step <= 6; ++step) {
    dog.set_phase(phase::forward, step);
    std::this_thread::sleep_for(50ms);
    dog.heartbeat(step);
  }
  const auto stalled_at = Clock::now();
  dog.set_phase(phase::backward, 7);  // ...and step 7 never finishes
  EXPECT_EQ(dog.current_phase(), "backward");

  auto future = fired.get_future();
  ASSERT_EQ(future.wait_for(3s), std::future_status::ready) << "the watchdog never fired";
  const auto [f, at] = future.get();
  const double after_s = std::chrono::duration<double>(at - stalled_at).count();
  EXPECT_GE(after_s, kTimeout - 0.01);  // not early; "not late" is the 3 s wait above
  EXPECT_TRUE(dog.fired());
  EXPECT_EQ(f.component, component::hip_runtime);
  EXPECT_EQ(f.signature, "hang");
  EXPECT_EQ(f.severity, Severity::fail);
  EXPECT_EQ(f.step, 7);
  EXPECT_EQ(f.rank, 2);
  EXPECT_EQ(f.evidence["phase"], "backward");
  EXPECT_EQ(f.evidence["last_completed_step"], 6);
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(log.snapshot()[0].signature, "hang");
}

TEST(Watchdog, StallInACollectiveIsAttributedToRccl) {
  FindingLog log(find_signature);
  std::promise<Finding> fired;
  Watchdog dog(kTimeout, 0, log, [&](const Finding& f) { fired.set_value(f); });
  dog.heartbeat(2);
  dog.set_phase(phase::grad_sync, 3, "allreduce 25165824 bytes seq 12");
  auto future = fired.get_future();
  ASSERT_EQ(future.wait_for(3s), std::future_status::ready);
  const Finding f = future.get();
  EXPECT_EQ(f.component, component::rccl);
  EXPECT_EQ(f.signature, "collective_hang");
  EXPECT_EQ(f.step, 3);
  EXPECT_EQ(f.evidence["last_collective"], "allreduce 25165824 bytes seq 12");
  EXPECT_NE(f.message.find("grad_sync"), std::string::npos);
}

// As the loop tells it: the optimizer phase brings the step's all-reduces, the watchdog names
// the last one, and later phases without collectives keep it.
TEST(Watchdog, NamesTheLastCollectiveTheLoopReported) {
  FindingLog log(find_signature);
  std::promise<Finding> fired;
  Watchdog dog(kTimeout, 0, log, [&](const Finding& f) { fired.set_value(f); });
  dog.heartbeat(4);
  const std::vector<CollectiveSample> collectives = {{.op = "allreduce", .bytes = 1024, .sequence = 11},
                                                     {.op = "allreduce", .bytes = 4096, .sequence = 12}};
  dog.on_phase(phase::optimizer, 5, collectives);
  dog.on_phase(phase::checksum, 5, {});
  auto future = fired.get_future();
  ASSERT_EQ(future.wait_for(3s), std::future_status::ready);
  const Finding f = future.get();
  EXPECT_EQ(f.evidence["phase"], "checksum");
  EXPECT_EQ(f.evidence["last_collective"], "allreduce of 4096 bytes (sequence 12)");
  EXPECT_NE(f.message.find("; last collective: allreduce of 4096 bytes (sequence 12)"), std::string::npos) << f.message;
}

TEST(Watchdog, SilentWhileHeartbeatsFlow) {
  FindingLog log(find_signature);
  bool fired = false;
  {
    Watchdog dog(kTimeout, 0, log, [&](const Finding&) { fired = true; });
    for (int64_t step = 1; step <= 24; ++step) {  // 1.2 s, four timeouts' worth
      dog.set_phase(phase::grad_sync, step, "allreduce");
      std::this_thread::sleep_for(50ms);
      dog.heartbeat(step);
    }
    EXPECT_FALSE(dog.fired());
  }
  EXPECT_FALSE(fired);
  EXPECT_EQ(log.size(), 0u);
}

TEST(Watchdog, StopsPromptlyWithALongTimeout) {
  FindingLog log(find_signature);
  const auto start = Clock::now();
  { Watchdog dog(300.0, 0, log, nullptr); }
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 0.5);
  EXPECT_EQ(log.size(), 0u);
}

TEST(Watchdog, CollectivePhaseNames) {
  EXPECT_TRUE(phase::is_collective(phase::grad_sync));
  EXPECT_TRUE(phase::is_collective(phase::checksum));
  EXPECT_TRUE(phase::is_collective(phase::loss_allreduce));
  EXPECT_TRUE(phase::is_collective("allreduce_canary"));
  EXPECT_TRUE(phase::is_collective("barrier"));
  EXPECT_FALSE(phase::is_collective(phase::forward));
  EXPECT_FALSE(phase::is_collective(phase::optimizer));
  EXPECT_FALSE(phase::is_collective(phase::checkpoint));
}

}  // namespace RCL_UNITY_ID
}  // namespace
}  // namespace rcl
