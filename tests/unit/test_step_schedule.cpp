// A step's schedule (loop/step_hooks.hpp: step_schedule, what --explain-step prints) against
// the trainer itself: a part overriding every hook records one step's calls, and they come in
// the table's order with every line reached; and where a part acts is read from its type.
#include <algorithm>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "rocm_conformance_llm/loop/trainer.hpp"
#include "support/resolved_config.hpp"

namespace rcl {
namespace {
namespace RCL_UNITY_ID {

// Every hook and the observer, noting the calls that belong to step `step_` by name.
class ScheduleRecorder final : public StepHooks, public StepObserver {
 public:
  explicit ScheduleRecorder(int64_t step) : step_(step) {}
  void on_phase(const char* phase, int64_t step, const std::vector<CollectiveSample>&) override { note(phase, step); }
  void on_step_begin(int64_t step) override { note("on_step_begin", step); }
  void before_forward(int64_t step, bool) override { note("before_forward", step); }
  torch::Tensor on_logits(torch::Tensor logits, int64_t step) override {
    note("on_logits", step);
    return logits;
  }
  void on_gradients(int64_t step, const std::vector<torch::Tensor>&, const torch::Tensor&, int64_t) override {
    note("on_gradients", step);
  }
  void before_step_time(StepRecord& rec, double) override { note("before_step_time", rec.step); }
  void on_loss(int64_t step, double) override { note("on_loss", step); }
  void before_publish(StepRecord& rec) override { note("before_publish", rec.step); }
  void on_step(const StepRecord& rec) override { note("on_step", rec.step); }
  void between_steps(int64_t step) override { note("between_steps", step); }

  std::vector<std::string> seen;  // step_'s calls in order, a repeat of the last one folded

 private:
  void note(const std::string& what, int64_t step) {
    if (step == step_ && (seen.empty() || seen.back() != what)) seen.push_back(what);
  }
  int64_t step_;
};

// Two micro-batches synced after each, validation every step: every line of the table is reached
// but the sharded layouts' gather after the update.
RunContext scheduled_run() {
  RunContext ctx;
  auto& c = ctx.cfg;
  c.hidden_size = 32;
  c.num_heads = 2;
  c.num_layers = 1;
  c.seq_len = 16;
  c.batch_size = 2;
  c.steps = 3;
  c.warmup_steps = 1;
  c.grad_accum_steps = 2;
  c.grad_sync_interval = 1;
  c.eval_interval = 1;
  c.eval_batches = 1;
  c.device = DeviceChoice::cpu;
  c = testing::on_the_cpu(c);
  return ctx;
}

TEST(StepSchedule, TheTrainerCallsEveryPointInTheTablesOrder) {
  ScheduleRecorder recorder(2);
  Trainer trainer(scheduled_run());
  trainer.add_hooks(&recorder);
  trainer.add_observer(&recorder);
  trainer.run();
  const auto lines = step_schedule();
  const auto first_micro_line =
      std::find_if(lines.begin(), lines.end(), [](const ScheduleLine& l) { return l.depth == 1; }) - lines.begin();
  // Each call at or after the previous one's line; inside the micro-batch loop, back to its top.
  size_t cursor = 0;
  for (const std::string& call : recorder.seen) {
    auto from = [&](size_t start) {
      for (size_t i = start; i < lines.size(); ++i)
        if (lines[i].what == call) return i;
      return lines.size();
    };
    size_t at = from(cursor);
    if (at == lines.size() && lines[cursor].depth == 1) at = from(size_t(first_micro_line));
    ASSERT_LT(at, lines.size()) << call << " comes after " << lines[cursor].what << ", not in the table's order";
    cursor = at;
  }
  // Two micro-batches: data, forward and backward each twice.
  EXPECT_EQ(std::count(recorder.seen.begin(), recorder.seen.end(), "backward"), 2);
  for (const ScheduleLine& line : lines) {
    const bool reached = std::find(recorder.seen.begin(), recorder.seen.end(), line.what) != recorder.seen.end();
    EXPECT_TRUE(reached) << line.what << " never called";
  }
}

// The points a step calls, read off the table the first test holds the trainer to: everything
// before between_steps is Trainer::train_step's; on_phase counts once for all its phases.
TEST(StepSchedule, AStepCallsAtMostSixPointsVisibly) {
  const auto lines = step_schedule();
  const auto between =
      std::find_if(lines.begin(), lines.end(), [](const ScheduleLine& l) { return l.what == "between_steps"; });
  ASSERT_NE(between, lines.end());
  std::vector<std::string_view> in_step{"on_phase"};
  for (auto line = lines.begin(); line != between; ++line)
    if (line->point) in_step.push_back(line->what);
  EXPECT_LE(in_step.size(), 6U) << "train_step calls " << in_step.size() << " points";
  EXPECT_EQ(between->point ? *between->point : HookPoint::phase, HookPoint::between_steps);
}

struct LossOnly : StepHooks {
  void on_loss(int64_t, double) override {}
};
struct Watcher : StepObserver, StepHooks {
  void on_step(const StepRecord&) override {}
  void on_phase(const char*, int64_t, const std::vector<CollectiveSample>&) override {}
};
// A base whose observer does nothing, and a part that overrides only a hook.
struct QuietBase : StepObserver, StepHooks {
  void on_step(const StepRecord&) override {}
};
struct GradientsBelowQuietBase : QuietBase {
  void on_gradients(int64_t, const std::vector<torch::Tensor>&, const torch::Tensor&, int64_t) override {}
};

HookPoints points(std::initializer_list<HookPoint> list) {
  HookPoints p;
  for (auto point : list) p.set(size_t(point));
  return p;
}

TEST(StepSchedule, WhereAPartActsIsReadFromItsOverrides) {
  EXPECT_EQ(hook_points_of<LossOnly>(), points({HookPoint::loss}));
  EXPECT_EQ(hook_points_of<Watcher>(), points({HookPoint::phase, HookPoint::published}));
  EXPECT_EQ(hook_points_of<ScheduleRecorder>().count(), kHookPoints);
  EXPECT_EQ(hook_points_of<GradientsBelowQuietBase>(), points({HookPoint::gradients, HookPoint::published}));
  EXPECT_EQ((hook_points_of<GradientsBelowQuietBase, QuietBase>()), points({HookPoint::gradients}));
}

}  // namespace RCL_UNITY_ID
}  // namespace
}  // namespace rcl
