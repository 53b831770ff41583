// metrics.jsonl as a step observer: each step's line, with the node monitor's latest sample.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "rocm_conformance_llm/loop/step_record.hpp"
#include "rocm_conformance_llm/reports/metrics_writer.hpp"

namespace rcl {

class MetricsObserver final : public StepObserver {
 public:
  MetricsObserver(const std::filesystem::path& dir, int rank, int local_rank, const std::string& host,
                  std::vector<std::string> modes, std::optional<int64_t> keep_through)
      : writer_(dir, rank, std::move(modes), keep_through) {
    writer_.set_identity(rank, local_rank, host);
  }
  // The node monitor's latest sample goes into each step line (it starts after the observers).
  void read_telemetry_from(std::function<nlohmann::json()> latest_sample) { telemetry_ = std::move(latest_sample); }
  void on_step(const StepRecord& r) override { writer_.write(r, telemetry_ ? telemetry_() : nullptr); }

 private:
  MetricsWriter writer_;
  std::function<nlohmann::json()> telemetry_;  // empty: no node monitor on this rank
};

}  // namespace rcl
