// report.json's "throughput": how much of the device the training used, as model FLOP
// utilisation (MFU) counted two ways against two peaks, each named, so that a figure quoted from
// one report is never compared with a figure of another kind (docs/performance.md).
#pragma once

#include <optional>

#include <nlohmann/json.hpp>

#include "rocm_conformance_llm/config.hpp"
#include "rocm_conformance_llm/platform/datasheet_peaks.hpp"

namespace rcl {

struct ThroughputInputs {
  double tokens_per_s = 0;                   // this rank's steady tokens/s (the report summary's overall)
  double measured_peak_tflops = 0;           // --device-peak-tflops (0: not measured)
  int ranks_per_token = 1;                   // ranks sharing each token's FLOPs: the tensor-parallel degree
  std::optional<std::string> device_model;   // the GPU model's name; none on the CPU or when unknown
};

// {"flops_per_token": {"model", "causal_useful"}, "tokens_per_s", "ranks_per_token",
//  "achieved_tflops": {"model", "causal_useful"} (this rank's),
//  "mfu": {"measured_peak": {peak_tflops, model, causal_useful} | null,
//          "datasheet_peak": {device_model, table_model, peak_tflops, source, model, causal_useful} | null},
//  "why_not": {"measured_peak"?: reason, "datasheet_peak"?: reason}}
nlohmann::json throughput_section(const TrainingConfig& cfg, const ThroughputInputs& in);

}  // namespace rcl
