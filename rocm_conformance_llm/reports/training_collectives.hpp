// report.json's `collectives.training`: every collective the training steps issued (DDP's bucket
// all-reduces, ZeRO's reduce-scatter and all-gather, tensor- and expert-parallel groups' own), one
// row per (group, kind, reduce op, dtype, bytes) with calls, latency and bus bandwidth, so a slow
// node or release shows as a slow row at the sizes real training uses (all-gather bus bandwidth
// collapsing from 2 MB on MI250X nodes, ROCm/rccl #1490; all-to-all hangs at 8-16 MB,
// rccl-tests #90). Built from the step records' collectives only: the battery's cases, the canaries
// and the checks' exchanges never enter a StepRecord, so they are not rows here.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "rocm_conformance_llm/loop/step_record.hpp"

namespace rcl {

// Thread-safe: a hang's report is written by the watchdog thread while the training thread may
// still publish.
class TrainingCollectives final : public StepObserver {
 public:
  // Latency and bandwidth figures are over the steps after `warmup_steps` (first-call set-up, RCCL's
  // connections among it, is not the link's speed), over every step when a row has no later one.
  explicit TrainingCollectives(int64_t warmup_steps = 0) : warmup_steps_(warmup_steps) {}

  void on_step(const StepRecord& record) override;

  // Sorted by group, kind, reduce_op, dtype (as strings), then bytes: [{group, kind, reduce_op,
  // dtype, bytes, ops, calls, timed_calls, latency_median_s, latency_p95_s, bus_bandwidth_gbps
  // (median), total_bytes}]. Empty when no step issued a collective (one rank).
  nlohmann::json rows() const;

  // Samples kept per row for its figures; past it, every other one is dropped and only every
  // second later one kept, so a long run's figures stay spread evenly over it at a bounded size.
  static constexpr size_t kMaxTimedSamples = 4096;

 private:
  struct Timings {
    std::vector<double> seconds, bus_bandwidth_gbps;
    int64_t stride = 1, offered = 0;  // keep every stride-th offered sample
    void add(double s, double gbps);
  };
  struct Row {
    std::set<std::string> ops;
    int64_t calls = 0, total_bytes = 0;
    Timings warmup, after_warmup;
  };
  using Key = std::tuple<std::string, std::string, std::string, std::string, int64_t>;

  const int64_t warmup_steps_;
  mutable std::mutex mutex_;
  std::map<Key, Row> rows_;
};

}  // namespace rcl
