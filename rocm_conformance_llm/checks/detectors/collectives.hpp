// RCCL collective latency: each collective is judged against the recent history of the same
// operation at the same size, so a 100 MiB bucket is never compared with a 4-byte checksum.
#pragma once

#include <deque>
#include <map>
#include <string>
#include <utility>

#include "rocm_conformance_llm/checks/findings/detector.hpp"

namespace rcl {

// collective_latency_spike (RCCL, warn, up to 5 per run): a post-warm-up collective whose
// robust z-score against the last window_steps samples of its (op, bytes) is >=
// collective_latency_zscore (raised over long runs: run_threshold), which took >= 2x their
// median (a z-score alone turns microsecond jitter on a very steady link into "spikes") AND
// whose extra time is >= collective_latency_min_step_fraction of the median step time (a
// millisecond hiccup in a 100 ms step costs nothing; on CPU ranks, whose Gloo collectives mostly
// wait for a peer the shared host descheduled, at least 4 median steps). Spikes never enter the
// baseline. Hangs and stalls at synchronisation points are the watchdog's (watchdog.hpp).
class CollectiveDetector final : public Detector {
 public:
  using Detector::Detector;
  void on_step(const StepRecord& r) override;

 private:
  std::map<std::pair<std::string, int64_t>, std::deque<double>> history_;
  std::deque<double> step_times_;  // the last window_steps step times
};

}  // namespace rcl
