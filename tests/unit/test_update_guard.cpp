// The non-finite update guard (loop/update_guard.hpp) over a real FlatAdamW on a few CPU
// weights: what it withholds, what a release gives back, and what it leaves alone.
#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "rocm_conformance_llm/loop/update_guard.hpp"

namespace rcl {
namespace {
namespace RCL_UNITY_ID {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

class UpdateGuardTest : public ::testing::Test {
 protected:
  // One optimizer step of `step` on the gradients of sum(w^2), its loss reported as `loss`
  // (NaN: a faulty step).
  void run_step(int64_t step, double loss, bool skipped = false, bool replay = false) {
    optimizer_.zero_grad();
    const auto& w = optimizer_.parameters().front();
    (w * w).sum().backward();
    const auto grad_norm = optimizer_.clip_grad_norm(0);
    if (!skipped) optimizer_.step(0.1, guard_.admit(torch::tensor(loss), grad_norm, step, replay));
  }
  torch::Tensor weights() const { return optimizer_.flat_params().clone(); }
  int64_t optimizer_steps() const { return optimizer_.state().steps; }
  bool withheld() const { return guard_.state().withheld.item<bool>(); }

  FlatAdamW optimizer_{{torch::linspace(-1.0, 1.0, 6).requires_grad_()}, {}, AdamWHyper{}};
  UpdateGuard guard_{torch::kCPU};
};

TEST_F(UpdateGuardTest, NonFiniteStepWithholdsItsUpdateAndLaterOnesUntilReleased) {
  run_step(1, 1.0);
  const auto after_1 = weights();
  run_step(2, kNaN);
  EXPECT_TRUE(withheld());
  EXPECT_TRUE(torch::equal(weights(), after_1)) << "the non-finite step's update was applied";
  run_step(3, 1.0);  // queued before the host read step 2
  EXPECT_TRUE(torch::equal(weights(), after_1)) << "the update after it was applied";

  // Step 1 published: finite, nothing to release.
  EXPECT_EQ(guard_.after_published(optimizer_, 1, false, 1.0, 1.0, 2), 0);
  EXPECT_TRUE(withheld());
  // Step 2 published: released, its update and step 3's forgotten.
  EXPECT_EQ(guard_.after_published(optimizer_, 2, false, kNaN, 1.0, 3), 2);
  EXPECT_FALSE(withheld());
  EXPECT_EQ(optimizer_steps(), 1);
  run_step(4, 1.0);
  EXPECT_FALSE(torch::equal(weights(), after_1)) << "training did not go on after the release";
  EXPECT_EQ(optimizer_steps(), 2);
}

TEST_F(UpdateGuardTest, AStepAlreadyAccountedForIsNotReleasedTwice) {
  run_step(1, kNaN);
  run_step(2, kNaN);
  EXPECT_EQ(guard_.after_published(optimizer_, 1, false, kNaN, kNaN, 2), 2);
  // Step 2 was withheld and forgotten with step 1: its own publication releases nothing.
  EXPECT_EQ(guard_.after_published(optimizer_, 2, false, kNaN, kNaN, 3), 0);
  EXPECT_EQ(optimizer_steps(), 0);
}

TEST_F(UpdateGuardTest, Fp16SkippedStepWithholdsNothing) {
  const auto before = weights();
  run_step(1, kNaN, /*skipped=*/true);
  EXPECT_FALSE(withheld());
  EXPECT_TRUE(torch::equal(weights(), before));
  EXPECT_EQ(optimizer_steps(), 0);
  EXPECT_EQ(guard_.after_published(optimizer_, 1, /*skipped=*/true, kNaN, kNaN, 2), 0);
  run_step(2, 1.0);
  EXPECT_FALSE(torch::equal(weights(), before)) << "the overflow withheld the next step's update";
  EXPECT_EQ(optimizer_steps(), 1);
}

TEST_F(UpdateGuardTest, ReplayStepsAreNotQueued) {
  run_step(1, kNaN);
  run_step(2, 1.0, false, /*replay=*/true);
  run_step(3, 1.0, false, /*replay=*/true);
  EXPECT_EQ(guard_.state().queued, std::deque<int64_t>{1});
  // Only the run's own withheld step is taken back; the replays' count is the caller's to rewind.
  EXPECT_EQ(guard_.after_published(optimizer_, 1, false, kNaN, 1.0, 1), 1);
}

TEST_F(UpdateGuardTest, KeepsOnlyTheRecentQueuedSteps) {
  for (int64_t step = 1; step <= 20; ++step) run_step(step, 1.0);
  const auto queued = guard_.state().queued;
  ASSERT_EQ(queued.size(), UpdateGuard::kQueuedUpdatesKept);
  EXPECT_EQ(queued.front(), 20 - int64_t(UpdateGuard::kQueuedUpdatesKept) + 1);
  EXPECT_EQ(queued.back(), 20);
}

// A snapshot's guard state puts the flag back: a rewind to before a non-finite step trains.
TEST_F(UpdateGuardTest, LoadedStateRestoresTheFlagAndTheBookkeeping) {
  run_step(1, 1.0);
  const UpdateGuard::State clear = guard_.state();
  run_step(2, kNaN);
  const UpdateGuard::State tripped = guard_.state();
  ASSERT_TRUE(tripped.withheld.item<bool>());
  EXPECT_FALSE(clear.withheld.item<bool>()) << "state() shares the live flag instead of copying it";
  guard_.load_state(clear);
  EXPECT_FALSE(withheld());
  EXPECT_EQ(guard_.state().queued, std::deque<int64_t>{1});
  const auto before = weights();
  run_step(2, 1.0);
  EXPECT_FALSE(torch::equal(weights(), before));
  guard_.load_state(tripped);
  EXPECT_TRUE(withheld());
}

}  // namespace RCL_UNITY_ID
}  // namespace
}  // namespace rcl
