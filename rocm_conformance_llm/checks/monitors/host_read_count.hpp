// diagnostics.count_host_reads: the blocking device-to-host reads of each step into its
// StepRecord (metrics.jsonl's host_reads). A step's window runs from its start to the next
// step's start, so everything the host does for it (publishing it during the next step, the
// checks between steps) is charged to it. Replays are not steps of the run: their reads fall
// into the window they ran in.
#pragma once

#include <cstdint>

#include "rocm_conformance_llm/base/host_reads.hpp"
#include "rocm_conformance_llm/loop/loop_access.hpp"
#include "rocm_conformance_llm/loop/step_hooks.hpp"

namespace rcl {

// Added before every other hook: the window opens before any hook of the step reads.
class HostReadCount final : public StepHooks {
 public:
  explicit HostReadCount(const LoopAccess& loop) : loop_(loop) {}

  void on_step_begin(int64_t step) override;
  void before_publish(StepRecord& rec) override;

 private:
  const LoopAccess& loop_;
  HostReadCounter counter_;
  int64_t latest_step_ = 0;  // the last step of the run begun
  int64_t reads_at_step_begin_ = 0, reads_in_previous_step_ = 0;
};

}  // namespace rcl
