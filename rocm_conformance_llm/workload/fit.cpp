#include "rocm_conformance_llm/workload/fit.hpp"

#include <algorithm>
#include <vector>

#include <fmt/format.h>
#if __has_include(<fmt/ranges.h>)
#include <fmt/ranges.h>  // fmt::join (moved there in fmt 11)
#endif

#include "rocm_conformance_llm/stress_modes.hpp"

namespace rcl {

const DeviceFitRule& device_fit_rule() {
  // Whole-block recompute costs only time (attention's forward again in backward); a smaller
  // micro-batch costs time too and changes the kernels' shapes, so it comes second.
  // The micro-batch is a throughput choice, not what any mode stresses: the memory mode's
  // sequence length, the gemm mode's widths, the fusion mode's depth are the stress and stay.
  // 10% of the device is left to the runtime's context, BLAS workspaces and the other
  // processes a shared node runs.
  static const DeviceFitRule rule{.switches_off = &TrainingConfig::checkpoint_keep_attention,
                                  .switches_off_why = "recompute whole blocks: the kept attention outputs do not fit",
                                  .lowers = &TrainingConfig::batch_size,
                                  .keeps_tokens_with = &TrainingConfig::grad_accum_steps,
                                  .usable_fraction = 0.9,
                                  .why = "smaller micro-batches, more of them: the same tokens per optimizer step"};
  return rule;
}

namespace {
TrainingConfig with_micro_batch(TrainingConfig cfg, const DeviceFitRule& rule, int64_t micro) {
  cfg.*rule.keeps_tokens_with *= cfg.*rule.lowers / micro;
  cfg.*rule.lowers = micro;
  return cfg;
}

TrainingConfig switched_off(TrainingConfig cfg, const DeviceFitRule& rule) {
  cfg.*rule.switches_off = false;
  return cfg;
}

// What the fit did, for its reason line: "FIELD a -> b (why)" for each step of the rule taken.
std::string steps_taken(const TrainingConfig& composed, const TrainingConfig& fitted, const DeviceFitRule& rule) {
  std::vector<std::string> steps;
  if (composed.*rule.switches_off != fitted.*rule.switches_off)
    steps.push_back(
        fmt::format("{} true -> false ({})", training_field_name(rule.switches_off), rule.switches_off_why));
  if (const int64_t before = composed.*rule.lowers, after = fitted.*rule.lowers; before != after) {
    steps.push_back(fmt::format("{} {} -> {}, {} x{} ({})", training_field_name(rule.lowers), before, after,
                                training_field_name(rule.keeps_tokens_with), before / after, rule.why));
  }
  return fmt::format("{}", fmt::join(steps, ", "));
}
}  // namespace

DeviceFit fit_to_device(const TrainingConfig& composed, const DeviceDescription& device) {
  const DeviceFitRule& rule = device_fit_rule();
  DeviceFit fit;
  fit.device = device;
  fit.available_bytes = int64_t(rule.usable_fraction * double(device.capacity_bytes));
  fit.composed = predict_step(composed, device);
  fit.training = composed;
  fit.fitted = fit.composed;
  // The rule's candidates in order: as composed; switched off where that lowers the peak; then
  // each smaller micro-batch, largest divisor first (the fewest extra micro-steps).
  std::vector<TrainingConfig> candidates{composed};
  TrainingConfig base = composed;
  const bool switching_off_helps =
      composed.*rule.switches_off &&
      predict_step(switched_off(composed, rule), device).peak_bytes < fit.composed.peak_bytes;
  if (switching_off_helps) candidates.push_back(base = switched_off(composed, rule));
  const int64_t batch = composed.*rule.lowers;
  for (int64_t micro = batch - 1; micro >= 1; --micro)
    if (batch % micro == 0) candidates.push_back(with_micro_batch(base, rule, micro));

  for (const TrainingConfig& candidate : candidates) {
    const SizingPrediction predicted = predict_step(candidate, device);
    if (predicted.peak_bytes > fit.available_bytes) continue;
    fit.fits = true;
    fit.training = candidate;
    fit.fitted = predicted;
    fit.changes = config_diff(composed, candidate);
    // Why switches_off stayed on where it mattered: the configuration fits with it.
    const std::string kept = switching_off_helps && fit.changes.empty()
                                 ? fmt::format(" with {} on", training_field_name(rule.switches_off))
                                 : "";
    fit.reason = fit.changes.empty()
                     ? fmt::format("fits{}: predicted peak {} of {} available", kept, gib_text(predicted.peak_bytes),
                                   gib_text(fit.available_bytes))
                     : fmt::format("{}: predicted peak {} -> {}, {} available", steps_taken(composed, candidate, rule),
                                   gib_text(fit.composed.peak_bytes), gib_text(predicted.peak_bytes),
                                   gib_text(fit.available_bytes));
    return fit;
  }
  const SizingPrediction& smallest = fit.fitted = predict_step(candidates.back(), device);
  fit.reason = fmt::format(
      "the configuration does not fit the device: predicted peak {} bytes ({}) even at {} 1 > available {} bytes "
      "({} of {} bytes, {}); lower what the stress modes raised (e.g. --set stress_profile.memory.min_seq_len=...) "
      "or use a larger device",
      smallest.peak_bytes, gib_text(smallest.peak_bytes), training_field_name(rule.lowers), fit.available_bytes,
      fmt::format("{:.0f}%", 100 * rule.usable_fraction), device.capacity_bytes, device.name);
  return fit;
}

HostMemoryCheck check_host_memory(const TrainingConfig& cfg, int ranks, int64_t available_bytes,
                                  const std::string& source) {
  HostMemoryCheck check;
  check.predicted = predict_step(cfg, DeviceDescription{.name = "the host", .accelerator = false});
  check.ranks = std::max(1, ranks);
  check.needed_bytes = check.predicted.peak_bytes * check.ranks;
  check.available_bytes = available_bytes;
  check.source = source;
  check.fits = check.needed_bytes <= available_bytes;
  const std::string per_rank =
      check.ranks == 1 ? "" : fmt::format(" per rank x {} ranks = {} bytes", check.ranks, check.needed_bytes);
  if (check.fits) {
    check.reason = fmt::format("fits: predicted peak {}{} of {} available ({})", gib_text(check.predicted.peak_bytes),
                               per_rank, gib_text(available_bytes), source);
    return check;
  }
  // Name the largest part of the peak: it is what to lower (the memory mode's ballast, the
  // logits of a large vocabulary, the activations of long sequences).
  MemoryTerm largest;
  for (const auto* terms : {&check.predicted.resident, &check.predicted.step, &check.predicted.optimizer})
    for (const auto& t : *terms)
      if (t.bytes > largest.bytes) largest = t;
  check.reason = fmt::format(
      "the configuration does not fit the host's memory: predicted peak {} bytes ({}){} > available {} bytes ({}); "
      "its largest part is {} {} ({}): lower it (e.g. --set memory_pressure_bytes=..., batch_size, seq_len or the "
      "model's size) or run on a larger host",
      check.predicted.peak_bytes, gib_text(check.predicted.peak_bytes), per_rank, available_bytes, source, largest.name,
      gib_text(largest.bytes), largest.formula);
  return check;
}

nlohmann::json HostMemoryCheck::to_json() const {
  return {{"ranks", ranks},
          {"peak_bytes", predicted.peak_bytes},
          {"needed_bytes", needed_bytes},
          {"available_bytes", available_bytes},
          {"source", source},
          {"fits", fits},
          {"reason", reason}};
}

nlohmann::json DeviceFit::to_json() const {
  return {
      {"device", {{"name", device.name}, {"capacity_bytes", device.capacity_bytes}, {"peak_flops", device.peak_flops}}},
      {"rule",
       {{"switches_off", std::string(training_field_name(device_fit_rule().switches_off))},
        {"lowers", std::string(training_field_name(device_fit_rule().lowers))},
        {"keeps_tokens_with", std::string(training_field_name(device_fit_rule().keeps_tokens_with))},
        {"usable_fraction", device_fit_rule().usable_fraction}}},
      {"available_bytes", available_bytes},
      {"fits", fits},
      {"changes", changes},
      {"reason", reason},
      {"predicted_before_fit", composed.to_json()},
      {"predicted", fitted.to_json()}};
}

}  // namespace rcl
