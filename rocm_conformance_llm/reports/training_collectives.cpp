#include "rocm_conformance_llm/reports/training_collectives.hpp"

#include "rocm_conformance_llm/checks/findings/robust_stats.hpp"

namespace rcl {

void TrainingCollectives::Timings::add(double s, double gbps) {
  if (offered++ % stride != 0) return;
  seconds.push_back(s);
  bus_bandwidth_gbps.push_back(gbps);
  if (seconds.size() < kMaxTimedSamples) return;
  for (size_t i = 0; 2 * i < seconds.size(); ++i) {
    seconds[i] = seconds[2 * i];
    bus_bandwidth_gbps[i] = bus_bandwidth_gbps[2 * i];
  }
  seconds.resize((seconds.size() + 1) / 2);
  bus_bandwidth_gbps.resize(seconds.size());
  stride *= 2;
}

void TrainingCollectives::on_step(const StepRecord& record) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& c : record.collectives) {
    Row& row = rows_[{c.group, c.kind, c.reduce_op, c.dtype, c.bytes}];
    row.ops.insert(c.op);
    ++row.calls;
    row.total_bytes += c.bytes;
    (record.step > warmup_steps_ ? row.after_warmup : row.warmup).add(c.seconds, c.bus_bandwidth_gbps);
  }
}

nlohmann::json TrainingCollectives::rows() const {
  std::lock_guard<std::mutex> lock(mutex_);
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [key, row] : rows_) {
    const auto& [group, kind, reduce_op, dtype, bytes] = key;
    const Timings& timed = row.after_warmup.seconds.empty() ? row.warmup : row.after_warmup;
    out.push_back({{"group", group},
                   {"kind", kind},
                   {"reduce_op", reduce_op},
                   {"dtype", dtype},
                   {"bytes", bytes},
                   {"ops", row.ops},
                   {"calls", row.calls},
                   {"timed_calls", timed.offered},
                   {"latency_median_s", stats::median(timed.seconds)},
                   {"latency_p95_s", stats::percentile(timed.seconds, 0.95)},
                   {"bus_bandwidth_gbps", stats::median(timed.bus_bandwidth_gbps)},
                   {"total_bytes", row.total_bytes}});
  }
  return out;
}

}  // namespace rcl
