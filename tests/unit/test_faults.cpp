// --inject parsing, the FaultPlan queries the trainer makes every step, and what the injector
// does to a step's record.
#include <gtest/gtest.h>

#include "rocm_conformance_llm/config.hpp"
#include "rocm_conformance_llm/faults/fault_plan.hpp"
#include "rocm_conformance_llm/faults/faults.hpp"
#include "rocm_conformance_llm/model.hpp"
#include "rocm_conformance_llm/transport/communicator.hpp"
#include "support/config_error.hpp"
#include "support/resolved_config.hpp"

namespace rcl {
namespace {
namespace RCL_UNITY_ID {

TEST(FaultPlan, EmptyTextIsAnEmptyPlan) {
  const auto plan = FaultPlan::parse("");
  EXPECT_TRUE(plan.empty());
  EXPECT_FALSE(plan.fires(FaultKind::nan, 20, 0));
  EXPECT_TRUE(FaultPlan::parse("  ").empty());
  EXPECT_TRUE(FaultPlan().empty());
}

TEST(FaultPlan, OneShotFaultsFireOnlyAtTheirStep) {
  const auto plan = FaultPlan::parse("nan@step=20,grad-bitflip@step=30,loss-spike@step=25,hang@step=40");
  EXPECT_FALSE(plan.empty());
  EXPECT_TRUE(plan.fires(FaultKind::nan, 20, 0));
  EXPECT_FALSE(plan.fires(FaultKind::nan, 19, 0));
  EXPECT_FALSE(plan.fires(FaultKind::nan, 21, 0));
  EXPECT_TRUE(plan.fires(FaultKind::grad_bitflip, 30, 3));
  EXPECT_TRUE(plan.fires(FaultKind::loss_spike, 25, 0));
  EXPECT_TRUE(plan.fires(FaultKind::hang, 40, 0));
  EXPECT_FALSE(plan.fires(FaultKind::slow_step, 40, 0));
  EXPECT_FALSE(plan.requested(FaultKind::gemm_corrupt));
}

TEST(FaultPlan, PersistentFaultsFireFromTheirStepWithValues) {
  const auto plan = FaultPlan::parse("slow-step@step=15=0.5,memory-leak=8MiB/step,gemm-corrupt");
  EXPECT_FALSE(plan.fires(FaultKind::slow_step, 14, 0));
  ASSERT_TRUE(plan.fires(FaultKind::slow_step, 15, 0));
  EXPECT_TRUE(plan.fires(FaultKind::slow_step, 60, 0));
  EXPECT_DOUBLE_EQ(plan.active(FaultKind::slow_step, 15, 0)->seconds, 0.5);
  ASSERT_TRUE(plan.fires(FaultKind::memory_leak, 1, 0));
  EXPECT_EQ(plan.active(FaultKind::memory_leak, 7, 0)->bytes_per_step, 8 << 20);
  EXPECT_TRUE(plan.fires(FaultKind::gemm_corrupt, 1, 0));
  EXPECT_TRUE(plan.fires(FaultKind::gemm_corrupt, 1000, 5));
}

TEST(FaultPlan, SlowCollectiveIsOneShotWithAnOptionalDelay) {
  const auto plan = FaultPlan::parse("slow-collective=3@step=30@rank=1");
  EXPECT_FALSE(plan.fires(FaultKind::slow_collective, 29, 1));
  ASSERT_TRUE(plan.fires(FaultKind::slow_collective, 30, 1));
  EXPECT_FALSE(plan.fires(FaultKind::slow_collective, 31, 1));
  EXPECT_FALSE(plan.fires(FaultKind::slow_collective, 30, 0));
  EXPECT_DOUBLE_EQ(plan.active(FaultKind::slow_collective, 30, 1)->seconds, 3.0);
  EXPECT_DOUBLE_EQ(FaultPlan::parse("slow-collective@step=4").active(FaultKind::slow_collective, 4, 0)->seconds, 0.0);
  EXPECT_THROW(FaultPlan::parse("slow-collective=3"), ConfigError);  // needs @step
}

// A collective timed on the device's stream (RCCL on libtorch 2.x) gets its seconds only when the
// step is published: the injected delay must land on that time too, or the fault goes unseen.
TEST(FaultInjector, SlowCollectiveDelayOutlivesTheDeviceTimeReadAtPublish) {
  const auto plan = FaultPlan::parse("slow-collective=0.01@step=3");
  const TrainingConfig tiny =
      testing::on_the_cpu({.hidden_size = 16, .num_layers = 1, .seq_len = 8, .num_heads = 2, .vocab_size = 20});
  FaultInjector injector(plan, 0, GPT(tiny), torch::Device(torch::kCPU));
  CollectiveSample host_timed{.op = "allreduce_grads", .bytes = 1024, .seconds = 0.002};
  CollectiveSample device_timed = host_timed;
  device_timed.settle = settle_on_device_time([] { return 0.005; }, 0.002, CollectiveKind::all_reduce, 2);

  StepRecord rec;
  rec.step = 3;
  rec.collectives = {host_timed};
  injector.before_step_time(rec, 0.001);
  EXPECT_DOUBLE_EQ(rec.collectives.back().seconds, 0.012);
  EXPECT_FALSE(rec.collectives.back().settle);

  rec.collectives = {device_timed};
  injector.before_step_time(rec, 0.001);
  auto& late = rec.collectives.back();
  ASSERT_TRUE(late.settle);
  late.settle(late);
  EXPECT_DOUBLE_EQ(late.seconds, 0.015);
  EXPECT_DOUBLE_EQ(late.bus_bandwidth_gbps, bus_bandwidth_gbps(CollectiveKind::all_reduce, 1024, 0.015, 2));

  rec.step = 4;  // not the fault's step: the device's time stands alone
  rec.collectives = {device_timed};
  injector.before_step_time(rec, 0.001);
  rec.collectives.back().settle(rec.collectives.back());
  EXPECT_DOUBLE_EQ(rec.collectives.back().seconds, 0.005);
}

TEST(FaultPlan, ValueCanPrecedeTheSelectors) {
  const auto a = FaultPlan::parse("slow-step=2@step=15");
  const auto b = FaultPlan::parse("slow-step@step=15=2s");
  EXPECT_EQ(a.to_string(), b.to_string());
  EXPECT_EQ(a.to_string(), "slow-step=2@step=15");
}

TEST(FaultPlan, DefaultsAndSizeUnits) {
  const auto plan = FaultPlan::parse("slow-step,memory-leak");
  EXPECT_DOUBLE_EQ(plan.active(FaultKind::slow_step, 1, 0)->seconds, 0.0);  // relative to the step
  EXPECT_EQ(plan.to_string(), "slow-step,memory-leak=8MiB/step");
  EXPECT_EQ(plan.active(FaultKind::memory_leak, 1, 0)->bytes_per_step, 8 << 20);
  EXPECT_EQ(FaultPlan::parse("memory-leak=512KiB").active(FaultKind::memory_leak, 1, 0)->bytes_per_step, 512 << 10);
  EXPECT_EQ(FaultPlan::parse("memory-leak=1GiB/step").active(FaultKind::memory_leak, 1, 0)->bytes_per_step,
            int64_t{1} << 30);
  EXPECT_EQ(FaultPlan::parse("memory-leak=1.5MiB").active(FaultKind::memory_leak, 1, 0)->bytes_per_step, 3 << 19);
  EXPECT_EQ(FaultPlan::parse("memory-leak=4096").active(FaultKind::memory_leak, 1, 0)->bytes_per_step, 4096);
}

TEST(FaultPlan, RankSelectorRestrictsTheFault) {
  const auto plan = FaultPlan::parse("rng-skew@rank=1,nan@rank=0@step=20");
  EXPECT_FALSE(plan.fires(FaultKind::rng_skew, 5, 0));
  EXPECT_TRUE(plan.fires(FaultKind::rng_skew, 5, 1));
  EXPECT_TRUE(plan.fires(FaultKind::nan, 20, 0));
  EXPECT_FALSE(plan.fires(FaultKind::nan, 20, 1));
  EXPECT_EQ(plan.to_string(), "nan@step=20@rank=0,rng-skew@rank=1");
}

TEST(FaultPlan, DuplicatesCollapseAndOrderIsIrrelevant) {
  const auto a = FaultPlan::parse("gemm-corrupt, nan@step=20,gemm-corrupt,memory-leak=8MiB");
  const auto b = FaultPlan::parse("memory-leak=8388608B/step,nan@step=20,gemm-corrupt");
  EXPECT_EQ(a.to_string(), b.to_string());
  EXPECT_EQ(a.specs().size(), 3u);
  EXPECT_EQ(a.to_json(), nlohmann::json({"nan@step=20", "memory-leak=8MiB/step", "gemm-corrupt"}));
}

TEST(FaultPlan, SameKindAtSeveralStepsIsKept) {
  const auto plan = FaultPlan::parse("nan@step=40,nan@step=20,slow-step@step=10=0.1,slow-step@step=30=1");
  EXPECT_TRUE(plan.fires(FaultKind::nan, 20, 0));
  EXPECT_TRUE(plan.fires(FaultKind::nan, 40, 0));
  EXPECT_FALSE(plan.fires(FaultKind::nan, 30, 0));
  EXPECT_DOUBLE_EQ(plan.active(FaultKind::slow_step, 20, 0)->seconds, 0.1);
  EXPECT_DOUBLE_EQ(plan.active(FaultKind::slow_step, 35, 0)->seconds, 1.0);  // latest start wins
}

void expect_config_error(const std::string& text, const std::string& fragment) {
  const std::string what = testing::config_error_of([&] { FaultPlan::parse(text); });
  EXPECT_NE(what.find(fragment), std::string::npos) << "'" << text << "': '" << what << "'";
  EXPECT_NE(what.find("Known faults: nan, grad-bitflip"), std::string::npos) << what;
  EXPECT_NE(what.find("NAME[=VALUE][@step=N][@rank=R]"), std::string::npos) << what;
}

TEST(FaultPlan, BadSpecsAreConfigErrorsListingKnownFaultsAndSyntax) {
  expect_config_error("segfault@step=3", "unknown fault 'segfault'");
  expect_config_error("nan", "'nan' needs @step=N");
  expect_config_error("hang@step=0", "@step must be an integer >= 1");
  expect_config_error("nan@step=abc", "got 'abc'");
  expect_config_error("nan@step=20=3", "'nan' takes no value");
  expect_config_error("rng-skew@rank=-1", "@rank must be an integer >= 0");
  expect_config_error("nan@step=2@step=3", "@step is given twice");
  expect_config_error("nan@when=3", "unknown selector '@when'");
  expect_config_error("nan@step", "has no '='");
  expect_config_error("slow-step=fast", "SECONDS must be a positive number");
  expect_config_error("slow-step=-1", "SECONDS must be a positive number");
  expect_config_error("slow-step=1@step=3=2", "the value is given twice");
  expect_config_error("memory-leak=8TiB", "SIZE");
  expect_config_error("memory-leak=0MiB", "SIZE");
  expect_config_error("nan@step=20,,gemm-corrupt", "empty entry");
  expect_config_error("gemm-corrupt=1", "takes no value");
}

// rank-stop: a phase is required and must be one the run has; it prints back canonically.
TEST(FaultPlan, RankStopNamesAPhase) {
  expect_config_error("rank-stop", "'rank-stop' needs @phase=P");
  expect_config_error("rank-stop@phase=lunch", "unknown phase 'lunch' (allowed: rendezvous, preflight, data");
  expect_config_error("rank-stop@phase=eval@phase=replay", "@phase is given twice");
  expect_config_error("nan@step=3@phase=eval", "unknown selector '@phase' (allowed: @step=N, @rank=R)");
  const auto plan = FaultPlan::parse("rank-stop@rank=1@step=3@phase=grad_sync");
  EXPECT_EQ(plan.to_string(), "rank-stop@phase=grad_sync@step=3@rank=1");
  EXPECT_EQ(FaultPlan::parse(plan.to_string()).specs(), plan.specs());
  EXPECT_EQ(FaultPlan::parse("rank-stop@phase=eval,rank-stop@phase=replay").specs().size(), 2u);
  // Not this rank, not this phase, not this step: nothing happens (a wrong match would stop the test).
  plan.stop_rank_if_planned("grad_sync", 3, 0);
  plan.stop_rank_if_planned("eval", 3, 1);
  plan.stop_rank_if_planned("grad_sync", 4, 1);
}

TEST(FaultPlan, ConflictingValuesForTheSameStepAreRejected) {
  EXPECT_THROW(FaultPlan::parse("slow-step=1@step=5,slow-step=2@step=5"), ConfigError);
}

}  // namespace RCL_UNITY_ID
}  // namespace
}  // namespace rcl
