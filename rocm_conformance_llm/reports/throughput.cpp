#include "rocm_conformance_llm/reports/throughput.hpp"

#include <algorithm>

#include "rocm_conformance_llm/model.hpp"

namespace rcl {

nlohmann::json throughput_section(const TrainingConfig& cfg, const ThroughputInputs& in) {
  const double model_fpt = flops_per_token(cfg), causal_fpt = causal_flops_per_token(cfg);
  // A tensor-parallel group's ranks all count the same tokens, each doing its share of them.
  const double tokens_of_this_rank = in.tokens_per_s / std::max(1, in.ranks_per_token);
  const double model_tflops = model_fpt * tokens_of_this_rank / 1e12, causal_tflops = causal_fpt * tokens_of_this_rank / 1e12;
  const auto against = [&](double peak_tflops) {
    return nlohmann::json{{"peak_tflops", peak_tflops},
                          {"model", model_tflops / peak_tflops},
                          {"causal_useful", causal_tflops / peak_tflops}};
  };
  nlohmann::json j = {{"flops_per_token", {{"model", model_fpt}, {"causal_useful", causal_fpt}}},
                      {"tokens_per_s", in.tokens_per_s},
                      {"ranks_per_token", in.ranks_per_token},
                      {"achieved_tflops", {{"model", model_tflops}, {"causal_useful", causal_tflops}}},
                      {"mfu", {{"measured_peak", nullptr}, {"datasheet_peak", nullptr}}},
                      {"why_not", nlohmann::json::object()}};
  if (in.measured_peak_tflops > 0)
    j["mfu"]["measured_peak"] = against(in.measured_peak_tflops);
  else
    j["why_not"]["measured_peak"] = "no --device-peak-tflops given (bench/gpu_bench.py measures one)";

  // The table holds bf16 (= fp16) matrix peaks: an fp32 run measured against them would read as
  // a fraction of a peak its precision can never reach.
  const auto entry = in.device_model ? find_datasheet_peak(*in.device_model) : std::nullopt;
  if (!in.device_model)
    j["why_not"]["datasheet_peak"] = "the device's model is unknown (a CPU, or GPUs of several models)";
  else if (!entry)
    j["why_not"]["datasheet_peak"] = "'" + *in.device_model + "' is not in the datasheet table";
  else if (cfg.mixed_precision == Precision::fp32)
    j["why_not"]["datasheet_peak"] = "the table holds bf16/fp16 peaks and this run trained in fp32";
  else {
    auto figure = against(entry->bf16_dense_tflops);
    figure["device_model"] = *in.device_model;
    figure["table_model"] = entry->model;
    figure["source"] = entry->source;
    j["mfu"]["datasheet_peak"] = std::move(figure);
  }
  return j;
}

}  // namespace rcl
