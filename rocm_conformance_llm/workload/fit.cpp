#include "rocm_conformance_llm/workload/fit.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "rocm_conformance_llm/stress_modes.hpp"

namespace rcl {

const DeviceFitRule& device_fit_rule() {
  // The micro-batch is a throughput choice, not what any mode stresses: the memory mode's
  // sequence length, the gemm mode's widths, the fusion mode's depth are the stress and stay.
  // 10% of the device is left to the runtime's context, BLAS workspaces and the other
  // processes a shared node runs.
  static const DeviceFitRule rule{.lowers = "batch_size",
                                  .keeps_tokens_with = "grad_accum_steps",
                                  .usable_fraction = 0.9,
                                  .why = "smaller micro-batches, more of them: the same tokens per optimizer step"};
  return rule;
}

namespace {
TrainingConfig with_micro_batch(const TrainingConfig& cfg, const DeviceFitRule& rule, int64_t micro) {
  nlohmann::json j = cfg;
  const int64_t composed = j.at(rule.lowers).get<int64_t>();
  j[rule.keeps_tokens_with] = j.at(rule.keeps_tokens_with).get<int64_t>() * (composed / micro);
  j[rule.lowers] = micro;
  return j.get<TrainingConfig>();
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
  const int64_t batch = nlohmann::json(composed).at(rule.lowers).get<int64_t>();
  // Largest divisor first: the fewest extra micro-steps.
  for (int64_t micro = batch; micro >= 1; --micro) {
    if (batch % micro != 0) continue;
    const TrainingConfig candidate = with_micro_batch(composed, rule, micro);
    const SizingPrediction predicted = micro == batch ? fit.composed : predict_step(candidate, device);
    if (predicted.peak_bytes > fit.available_bytes) continue;
    fit.fits = true;
    fit.training = candidate;
    fit.fitted = predicted;
    fit.changes = config_diff(composed, candidate);
    fit.reason = micro == batch ? fmt::format("fits: predicted peak {} of {} available", gib_text(predicted.peak_bytes),
                                              gib_text(fit.available_bytes))
                                : fmt::format("{} {} -> {}, {} x{} ({}): predicted peak {} -> {}, {} available",
                                              rule.lowers, batch, micro, rule.keeps_tokens_with, batch / micro,
                                              rule.why, gib_text(fit.composed.peak_bytes),
                                              gib_text(predicted.peak_bytes), gib_text(fit.available_bytes));
    return fit;
  }
  const SizingPrediction& smallest = fit.fitted = predict_step(with_micro_batch(composed, rule, 1), device);
  fit.reason = fmt::format(
      "the configuration does not fit the device: predicted peak {} bytes ({}) even at {} 1 > available {} bytes "
      "({} of {} bytes, {}); lower what the stress modes raised (e.g. --set stress_profile.memory.min_seq_len=...) "
      "or use a larger device",
      smallest.peak_bytes, gib_text(smallest.peak_bytes), rule.lowers, fit.available_bytes,
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
       {{"lowers", device_fit_rule().lowers},
        {"keeps_tokens_with", device_fit_rule().keeps_tokens_with},
        {"usable_fraction", device_fit_rule().usable_fraction}}},
      {"available_bytes", available_bytes},
      {"fits", fits},
      {"changes", changes},
      {"reason", reason},
      {"predicted_before_fit", composed.to_json()},
      {"predicted", fitted.to_json()}};
}

}  // namespace rcl
