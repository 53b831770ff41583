#include "rocm_conformance_llm/checks/monitors/host_read_count.hpp"

namespace rcl {

void HostReadCount::on_step_begin(int64_t step) {
  if (loop_.replaying()) return;
  reads_in_previous_step_ = counter_.count() - reads_at_step_begin_;
  reads_at_step_begin_ = counter_.count();
  latest_step_ = step;
}

void HostReadCount::before_publish(StepRecord& rec) {
  // Step N is published during step N+1: its window closed when N+1 began. The last step is
  // published after the loop, its window still open.
  rec.host_reads = rec.step < latest_step_ ? reads_in_previous_step_ : counter_.count() - reads_at_step_begin_;
}

}  // namespace rcl
