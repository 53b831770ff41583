// The run's wiring (run/wiring.hpp): the order rules the runner depends on, checked on the table
// itself, and RunWiring attaching parts in the table's order whatever order they were added in.
#include <algorithm>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "rocm_conformance_llm/run/wiring.hpp"

namespace rcl {
namespace {
namespace RCL_UNITY_ID {

size_t position(std::string_view name) {
  const auto slots = run_wiring();
  const auto it = std::find_if(slots.begin(), slots.end(), [&](const WiringSlot& s) { return s.part == name; });
  EXPECT_NE(it, slots.end()) << name;
  return size_t(it - slots.begin());
}

TEST(RunWiringTable, EverySlotOnceWithItsReason) {
  std::set<std::string_view> names;
  for (const auto& slot : run_wiring()) {
    EXPECT_TRUE(names.insert(slot.part).second) << slot.part << " twice";
    EXPECT_GT(slot.reason.size(), 20u) << slot.part;
  }
  EXPECT_EQ(names.size(), 13u);
}

TEST(RunWiringTable, OrderRules) {
  const auto slots = run_wiring();
  // The summary first: a crash report has every finished step.
  EXPECT_EQ(slots.front().part, part::run_summary);
  // The files, the console and the collectives table hear a step before any check of it can end the run.
  for (const auto output : {part::metrics, part::prometheus, part::console, part::training_collectives})
    EXPECT_LT(position(output), position(part::detectors)) << output;
  // The fault injector's hooks run before every check's, so the checks see the fault.
  for (const auto check : {part::detectors, part::memory_profile, part::node_monitor, part::watchdog})
    EXPECT_LT(position(part::fault_injector), position(check)) << check;
  // Host reads are counted by the first hooks: a step's window opens before any other hook reads.
  for (size_t i = 0; i < position(part::host_read_count); ++i) EXPECT_EQ(slots[i].attach, Attach::observer) << i;
  // The watchdog's heartbeat is the last observer: a step is done once every check of it returned.
  size_t last_observer = 0;
  for (size_t i = 0; i < slots.size(); ++i)
    if (slots[i].attach != Attach::hooks) last_observer = i;
  EXPECT_EQ(slots[last_observer].part, part::watchdog);
  // The checkpointer last: a checkpoint holds the state after every check between steps.
  EXPECT_EQ(slots.back().part, part::checkpointer);
  EXPECT_EQ(slots.back().attach, Attach::hooks);
}

struct Observer : StepObserver {
  void on_step(const StepRecord&) override {}
};
struct Hooks : StepHooks {};
struct Both : StepObserver, StepHooks {
  void on_step(const StepRecord&) override {}
};

TEST(RunWiring, AttachesInTheTablesOrderWhateverTheOrderAdded) {
  Hooks checkpointer, injector;
  Both detector_a, detector_b, watchdog;
  Observer summary, metrics;
  RunWiring wiring;
  wiring.add(part::checkpointer, &checkpointer);
  wiring.add(part::detectors, &detector_a);
  wiring.add(part::watchdog, &watchdog);
  wiring.add(part::fault_injector, &injector);
  wiring.add(part::metrics, &metrics);
  wiring.add(part::detectors, &detector_b);
  wiring.add(part::run_summary, &summary);
  std::vector<StepObserver*> observers;
  std::vector<StepHooks*> hooks;
  for (const auto& a : wiring.in_order()) {
    if (a.observer) observers.push_back(a.observer);
    if (a.hooks) hooks.push_back(a.hooks);
  }
  EXPECT_EQ(observers, (std::vector<StepObserver*>{&summary, &metrics, &detector_a, &detector_b, &watchdog}));
  EXPECT_EQ(hooks, (std::vector<StepHooks*>{&injector, &detector_a, &detector_b, &watchdog, &checkpointer}));
}

TEST(RunWiring, RefusesAnUnknownSlotOrAPartItCannotAttach) {
  Observer observer;
  Hooks hooks;
  Both both;
  RunWiring wiring;
  EXPECT_THROW(wiring.add("no_such_part", &both), std::logic_error);
  EXPECT_THROW(wiring.add(part::detectors, &observer), std::logic_error);  // a detector is both
  EXPECT_THROW(wiring.add(part::metrics, &hooks), std::logic_error);
  wiring.add(part::metrics, &both);  // attached as what the slot says: an observer only
  ASSERT_EQ(wiring.in_order().size(), 1u);
  EXPECT_EQ(wiring.in_order()[0].hooks, nullptr);
}

// What --explain-step lists: each part under its slot's name (a detector under its own), where
// its type says it acts, and a part only described (not built) attached nowhere.
struct LossWatch : Detector {
  using Detector::Detector;
  void on_loss(int64_t, double) override {}
};

TEST(RunWiring, NamesEachPartAndWhereItActs) {
  Hooks injector;
  Observer metrics;
  DiagnosticsConfig diag;
  FindingLog log([](std::string_view) -> const SignatureSpec* { return nullptr; });
  auto detector = Detector::build<LossWatch>(diag, log);
  detector->set_name("loss_watch");
  RunWiring wiring;
  wiring.add(part::fault_injector, &injector);
  wiring.add(part::metrics, &metrics);
  wiring.add(part::detectors, detector.get());
  wiring.describe<Both>(part::watchdog);
  const auto parts = wiring.in_order();
  ASSERT_EQ(parts.size(), 4u);
  const auto only = [](HookPoint p) { return HookPoints().set(size_t(p)); };
  EXPECT_EQ(parts[0].name, "metrics");
  EXPECT_EQ(parts[0].points, only(HookPoint::published));
  EXPECT_EQ(parts[1].name, "fault_injector");
  EXPECT_TRUE(parts[1].points.none());  // overrides no hook
  EXPECT_EQ(parts[2].name, "loss_watch");
  EXPECT_EQ(parts[2].points, only(HookPoint::loss));  // the detector base's on_step is no act
  EXPECT_EQ(parts[3].name, "watchdog");
  EXPECT_EQ(parts[3].points, only(HookPoint::published));
  EXPECT_EQ(parts[3].observer, nullptr);
  EXPECT_EQ(parts[3].hooks, nullptr);
}

}  // namespace RCL_UNITY_ID
}  // namespace
}  // namespace rcl
