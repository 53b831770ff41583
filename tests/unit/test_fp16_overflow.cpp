// The fp16 dynamic loss scaler on the real model on the CPU: a real overflow of the fp16
// gradients -> skipped steps -> back-off -> clean steps -> regrowth. Through the binary:
// tests/binary/test_fp16_training.cpp. libtorch 1.13 has no fp16 matmul on the CPU: the test
// skips there only, saying so.
#include <gtest/gtest.h>

#include "rocm_conformance_llm/loop/trainer.hpp"
#include "support/cpu_fp16.hpp"
#include "support/resolved_config.hpp"
#include "support/step_recorder.hpp"

namespace rcl {
namespace {
namespace RCL_UNITY_ID {

using Recorder = test::StepRecorder;

// A loss scale of 2^24 overflows fp16 for real: the LM head's logit gradients are about
// 1/(B*T) = 1/128 each, times 2^24 is 131072 > 65504, so autocast's fp16 backward gives Inf.
// The scaler must skip and halve until the gradients fit, then train, then grow back after
// every fp16_growth_interval clean steps.
TEST(Fp16Training, RealOverflowSkipsBacksOffAndRegrowsOnTheModel) {
  RCL_REQUIRE_FP16_MATMUL();
  RunContext ctx;
  auto& c = ctx.cfg;
  c.hidden_size = 32, c.num_heads = 2, c.num_layers = 2, c.seq_len = 32, c.batch_size = 4;
  c.steps = 24, c.warmup_steps = 2, c.eval_interval = 0, c.device = DeviceChoice::cpu;
  c.mixed_precision = Precision::fp16;
  c.fp16_initial_loss_scale = 16777216.0;  // 2^24
  c.fp16_growth_interval = 3;
  c = testing::on_the_cpu(c);
  Trainer trainer(ctx);
  Recorder recorder;
  trainer.add_observer(&recorder);
  const TrainSummary summary = trainer.run();
  const auto& r = recorder.records;
  ASSERT_EQ(r.size(), 24u);

  ASSERT_TRUE(r[0].skipped) << "2^24 must overflow fp16";
  size_t first_clean = 0;
  while (first_clean < r.size() && r[first_clean].skipped) {
    if (first_clean + 1 < r.size()) EXPECT_EQ(r[first_clean + 1].loss_scale, r[first_clean].loss_scale / 2);
    ++first_clean;
  }
  ASSERT_LT(first_clean, r.size()) << "never recovered";
  EXPECT_LT(r[first_clean].loss_scale, 16777216.0);
  bool regrew = false;
  for (size_t i = first_clean + 1; i < r.size(); ++i) regrew |= r[i].loss_scale > r[i - 1].loss_scale;
  EXPECT_TRUE(regrew) << "the scale never grew back";
  int64_t skipped = 0;
  for (const auto& rec : r) {
    skipped += rec.skipped ? 1 : 0;
    EXPECT_TRUE(std::isfinite(rec.loss)) << rec.step;
  }
  EXPECT_EQ(summary.skipped_steps, skipped);
  EXPECT_LT(r.back().loss, r[first_clean].loss) << "fp16 training after the back-off still learns";
}

}  // namespace RCL_UNITY_ID
}  // namespace
}  // namespace rcl
