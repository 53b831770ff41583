// Fit after composing, with posed devices: a composition the device cannot hold is refused with
// its numbers, one that fits after the fit rule is shown changed, compose + fit is
// order-independent, and the fit never undoes what a mode asked for. The prediction itself is
// checked against measured peaks in test_sizing.cpp.
#include <gtest/gtest.h>

#include "support/resolve_args.hpp"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>

#include <fmt/format.h>
#if __has_include(<fmt/ranges.h>)
#include <fmt/ranges.h>  // fmt::join (moved there in fmt 11)
#endif

#include "rocm_conformance_llm/base/errors.hpp"
#include "rocm_conformance_llm/platform/device.hpp"
#include "rocm_conformance_llm/run/cli.hpp"
#include "rocm_conformance_llm/stress_modes.hpp"
#include "rocm_conformance_llm/workload/fit.hpp"
#include "support/config_error.hpp"
#include "support/resolved_config.hpp"

namespace rcl {
namespace {
namespace RCL_UNITY_ID {

constexpr int64_t GB = 1'000'000'000;

DeviceDescription posed(int64_t bytes) { return {.name = "posed", .capacity_bytes = bytes}; }

using rcl::testing::config_error_of;
using rcl::testing::resolve_args;

// Every non-empty subset of the registered modes, in canonical order.
std::vector<std::vector<std::string>> every_composition() {
  const auto names = stress_mode_names();
  std::vector<std::vector<std::string>> out;
  for (size_t mask = 1; mask < (size_t{1} << names.size()); ++mask) {
    std::vector<std::string> modes;
    for (size_t i = 0; i < names.size(); ++i)
      if (mask & (size_t{1} << i)) modes.push_back(names[i]);
    out.push_back(modes);
  }
  return out;
}

TrainingConfig compose(const std::string& preset, const std::vector<std::string>& modes) {
  const Preset& p = find_preset(preset);
  const Capabilities gpu = Capabilities::of_this_build(/*gpu=*/true);
  return compose_stress_modes(testing::resolved_for(p.training, gpu), modes, complete_stress_profile(p.stress), gpu)
      .training;
}

TEST(DeviceFit, ACompositionThatCannotFitIsRefusedWithItsPredictedAndAvailableBytes) {
  const std::vector<std::string> args = {"--preset",           "small",           "--stress",
                                         "gemm,memory,fusion", "--device-memory", "8GB"};
  const TrainingConfig composed = compose("small", {"gemm", "memory", "fusion"});
  TrainingConfig one_sequence = composed;  // the fit's last try: whole blocks recomputed, one sequence
  one_sequence.checkpoint_keep_attention = false;
  one_sequence.grad_accum_steps *= one_sequence.batch_size;
  one_sequence.batch_size = 1;
  const int64_t predicted = predict_step(one_sequence, posed(8 * GB)).peak_bytes;
  const auto available = int64_t(device_fit_rule().usable_fraction * double(8 * GB));
  ASSERT_GT(predicted, available) << "the posed device must be too small for this test";
  const std::string message = config_error_of([&] { resolve_args(args); });
  ASSERT_FALSE(message.empty()) << "a composition predicted at " << predicted << " bytes ran on " << available;
  EXPECT_NE(message.find(fmt::format("predicted peak {} bytes", predicted)), std::string::npos) << message;
  EXPECT_NE(message.find(fmt::format("available {} bytes", available)), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  // --print-config and --explain-stress show it, and say it is refused.
  std::vector<std::string> explain = args;
  explain.push_back("--explain-stress");
  const RunConfig shown = resolve_args(explain);
  ASSERT_TRUE(shown.fit.has_value());
  EXPECT_FALSE(shown.fit->fits);
  EXPECT_EQ(refusal(shown), shown.fit->reason);
  EXPECT_EQ(shown.training, composed) << "a refused fit changes nothing";
}

TEST(DeviceFit, ACompositionThatFitsAfterTheRuleIsShownChanged) {
  // A device 80% the size of the composition's predicted peak: the prediction depends on the
  // libtorch (a 2.x build sends the memory mode's long sequences through fused attention).
  // Attention is not kept here, so the micro-batch is the rule's only step.
  const std::vector<std::string> args = {"--preset",           "small", "--stress",
                                         "gemm,memory,fusion", "--set", "checkpoint_keep_attention=false",
                                         "--device-memory"};
  auto with_device = [&](const std::string& bytes) {
    std::vector<std::string> all = args;
    all.push_back(bytes);
    return resolve_args(all);
  };
  const RunConfig unconstrained = with_device("1000TB");
  ASSERT_TRUE(unconstrained.fit.has_value());
  const RunConfig run = with_device(std::to_string(unconstrained.fit->composed.peak_bytes * 8 / 10));
  TrainingConfig composed = compose("small", {"gemm", "memory", "fusion"});
  composed.checkpoint_keep_attention = false;
  ASSERT_TRUE(run.fit.has_value());
  ASSERT_TRUE(run.fit->fits) << run.fit->reason;
  ASSERT_GT(run.fit->composed.peak_bytes, run.fit->available_bytes) << "pose a device the composition overflows";
  EXPECT_LE(run.fit->fitted.peak_bytes, run.fit->available_bytes);
  EXPECT_LT(run.training.batch_size, composed.batch_size);
  EXPECT_EQ(run.training.batch_size * run.training.grad_accum_steps, composed.batch_size * composed.grad_accum_steps)
      << "the same tokens per optimizer step";
  // The largest micro-batch that fits: the next larger divisor does not.
  for (int64_t larger = run.training.batch_size + 1; larger <= composed.batch_size; ++larger) {
    if (composed.batch_size % larger != 0) continue;
    TrainingConfig bigger = run.training;
    bigger.batch_size = larger;
    EXPECT_GT(predict_step(bigger, run.fit->device).peak_bytes, run.fit->available_bytes) << larger;
    break;
  }
  // Only the rule's fields changed, and the record says so in config.json and --explain-stress.
  EXPECT_EQ(config_diff(composed, run.training), run.fit->changes);
  EXPECT_EQ(run.fit->changes.size(), 2u) << run.fit->changes.dump();
  const auto doc = to_json(run);
  EXPECT_EQ(doc.at("fit").at("changes").at("batch_size"),
            nlohmann::json({composed.batch_size, run.training.batch_size}));
  EXPECT_EQ(doc.at("training").at("batch_size"), run.training.batch_size);
  const std::string explained = explain_text(run);
  EXPECT_NE(explained.find(fmt::format("fit     batch_size                 {} -> {}", composed.batch_size,
                                       run.training.batch_size)),
            std::string::npos)
      << explained;
  EXPECT_TRUE(refusal(run).empty());
}

// The memory mode checkpoints; attention's outputs are kept where the device holds them, else
// whole blocks are recomputed first (it costs only time), and only then is the micro-batch lowered.
TEST(DeviceFit, KeepsAttentionWhereItFitsAndRecomputesWholeBlocksBeforeLoweringTheBatch) {
  const TrainingConfig composed = compose("small", {"memory"});
  ASSERT_TRUE(composed.activation_checkpointing && composed.checkpoint_keep_attention);
  ASSERT_GT(composed.batch_size, 1);
  TrainingConfig whole_blocks = composed;
  whole_blocks.checkpoint_keep_attention = false;
  const auto device_for = [](double peak_bytes) {
    return posed(int64_t(peak_bytes / device_fit_rule().usable_fraction));
  };
  const double kept_peak = double(predict_step(composed, posed(80 * GB)).peak_bytes);
  const double whole_peak = double(predict_step(whole_blocks, posed(80 * GB)).peak_bytes);
  ASSERT_LT(whole_peak, kept_peak);

  const auto roomy = fit_to_device(composed, device_for(kept_peak * 1.01));
  EXPECT_TRUE(roomy.fits && roomy.changes.empty()) << roomy.reason;
  EXPECT_TRUE(roomy.training.checkpoint_keep_attention);
  EXPECT_NE(roomy.reason.find("fits with checkpoint_keep_attention on"), std::string::npos) << roomy.reason;

  const auto between = fit_to_device(composed, device_for((kept_peak + whole_peak) / 2));
  ASSERT_TRUE(between.fits) << between.reason;
  EXPECT_EQ(between.training, whole_blocks) << "whole blocks at the composed micro-batch";
  EXPECT_EQ(between.changes, nlohmann::json({{"checkpoint_keep_attention", {true, false}}}));
  EXPECT_NE(between.reason.find("checkpoint_keep_attention true -> false (recompute whole blocks"), std::string::npos)
      << between.reason;
  EXPECT_EQ(between.to_json().at("rule").at("switches_off"), "checkpoint_keep_attention");

  const auto tight = fit_to_device(composed, device_for(whole_peak * 0.8));
  ASSERT_TRUE(tight.fits) << tight.reason;
  EXPECT_FALSE(tight.training.checkpoint_keep_attention);
  EXPECT_LT(tight.training.batch_size, composed.batch_size);
  EXPECT_EQ(tight.changes.size(), 3u) << tight.changes.dump();
  EXPECT_NE(tight.reason.find(fmt::format("checkpoint_keep_attention true -> false (recompute whole blocks: the kept "
                                          "attention outputs do not fit), batch_size {} -> {}",
                                          composed.batch_size, tight.training.batch_size)),
            std::string::npos)
      << tight.reason;

  // Without checkpointing the flag changes nothing, and the fit leaves it alone.
  TrainingConfig plain = compose("small", {"gemm"});
  ASSERT_FALSE(plain.activation_checkpointing);
  const double plain_peak = double(predict_step(plain, posed(80 * GB)).peak_bytes);
  const auto not_checkpointed = fit_to_device(plain, device_for(plain_peak * 0.8));
  EXPECT_TRUE(not_checkpointed.training.checkpoint_keep_attention);
  EXPECT_EQ(not_checkpointed.fits, !not_checkpointed.changes.empty());
}

TEST(DeviceFit, NoDeviceNoFitOnTheCpuAndTheCpuPresetsAreUnchanged) {
  for (const char* stress : {"all", "memory", "gemm,rng"}) {
    const RunConfig run = resolve_args({"--stress", stress});
    EXPECT_FALSE(run.fit.has_value()) << stress;
    EXPECT_TRUE(to_json(run).at("fit").is_null());
  }
  // A roomy posed device fits every smoke composition as composed.
  for (const auto& modes : every_composition()) {
    const auto fit = fit_to_device(compose("smoke", modes), posed(8 * GB));
    EXPECT_TRUE(fit.fits && fit.changes.empty()) << fmt::format("{}", fmt::join(modes, ","));
  }
}

TEST(DeviceFit, ComposeAndFitAreOrderIndependent) {
  std::mt19937 rng(7);
  for (const auto& [preset, device] :
       {std::pair{"smoke", posed(40 << 20)}, std::pair{"small", posed(80 * GB)}, std::pair{"large", posed(192 * GB)}}) {
    for (auto modes : every_composition()) {
      const auto reference = fit_to_device(compose(preset, modes), device);
      for (int shuffle = 0; shuffle < 3; ++shuffle) {
        std::shuffle(modes.begin(), modes.end(), rng);
        const auto again = fit_to_device(compose(preset, modes), device);
        EXPECT_EQ(again.training, reference.training) << preset << " " << fmt::format("{}", fmt::join(modes, ","));
        EXPECT_EQ(again.fits, reference.fits);
      }
    }
  }
}

TEST(DeviceFit, TheFitNeverUndoesAModeAndNoModeGuardsTheFieldsItMoves) {
  const DeviceFitRule& rule = device_fit_rule();
  // The registry: no mode raises what the fit lowers, nor lowers or sets what it raises.
  for (const auto& mode : stress_mode_registry())
    for (const auto& r : mode.rules) {
      EXPECT_FALSE(r.field == training_field_name(rule.lowers) && r.op != StressOp::kAtMost)
          << mode.name << " guards " << r.field;
      EXPECT_FALSE(r.field == training_field_name(rule.keeps_tokens_with) && r.op != StressOp::kAtLeast)
          << mode.name << " guards " << r.field;
      EXPECT_NE(r.field, training_field_name(rule.switches_off)) << mode.name << " guards " << r.field;
    }
  // Every composition, fitted to devices that make the rule act: applying its modes again to the
  // fitted config changes nothing (every floor and ceiling still holds).
  const auto profile_of = [](const std::string& preset) { return complete_stress_profile(find_preset(preset).stress); };
  int changed = 0;
  for (const auto& [preset, device] :
       {std::pair{"smoke", posed(40 << 20)}, std::pair{"small", posed(80 * GB)}, std::pair{"large", posed(192 * GB)}}) {
    for (const auto& modes : every_composition()) {
      const auto fit = fit_to_device(compose(preset, modes), device);
      if (!fit.fits) continue;
      changed += !fit.changes.empty();
      const auto reapplied =
          compose_stress_modes(fit.training, modes, profile_of(preset), Capabilities::of_this_build(true)).training;
      EXPECT_EQ(reapplied, fit.training) << preset << " " << fmt::format("{}", fmt::join(modes, ","));
      EXPECT_NO_THROW(validate(fit.training));
    }
  }
  EXPECT_GT(changed, 0) << "no composition made the fit act: the check above proved nothing";
}

// A CPU run is checked against the host's free memory, not fitted: one that fits keeps its
// configuration and says so; one that cannot is refused with its predicted and available bytes,
// per rank the host runs, naming the largest part of the peak.
TEST(HostMemory, ACpuRunTheHostCannotHoldIsRefusedWithItsNumbers) {
  const TrainingConfig smoke = testing::on_the_cpu(find_preset("smoke").training);
  const int64_t peak = predict_step(smoke, DeviceDescription{.accelerator = false}).peak_bytes;
  const auto fits = check_host_memory(smoke, 1, peak, "posed");
  EXPECT_TRUE(fits.fits) << fits.reason;
  EXPECT_EQ(fits.needed_bytes, peak);
  EXPECT_EQ(fits.predicted.allocator_slack_bytes, 0) << "the host's malloc caches nothing";
  EXPECT_FALSE(check_host_memory(smoke, 1, peak - 1, "posed").fits);
  // Four ranks on the host need four peaks.
  const auto four = check_host_memory(smoke, 4, 3 * peak, "posed");
  EXPECT_FALSE(four.fits);
  EXPECT_EQ(four.needed_bytes, 4 * peak);
  EXPECT_NE(four.reason.find(fmt::format("per rank x 4 ranks = {} bytes", 4 * peak)), std::string::npos) << four.reason;

  TrainingConfig ballast = smoke;
  ballast.memory_pressure_bytes = 100'000'000'000'000;
  const auto refused = check_host_memory(ballast, 1, 20 * GB, "MemAvailable in /proc/meminfo");
  EXPECT_FALSE(refused.fits);
  EXPECT_GT(refused.needed_bytes, ballast.memory_pressure_bytes);
  EXPECT_NE(refused.reason.find(fmt::format("predicted peak {} bytes", refused.predicted.peak_bytes)),
            std::string::npos)
      << refused.reason;
  EXPECT_NE(refused.reason.find("> available 20000000000 bytes (MemAvailable in /proc/meminfo)"), std::string::npos)
      << refused.reason;
  EXPECT_NE(refused.reason.find("its largest part is ballast"), std::string::npos) << refused.reason;
  EXPECT_EQ(refused.reason.find('\n'), std::string::npos);
}

TEST(HostMemory, TheResolvedCpuRunCarriesTheCheckAndTheRefusal) {
  const RunConfig run = resolve_args({"--stress", "memory"});
  ASSERT_TRUE(run.host_memory.has_value()) << "this host's /proc/meminfo has MemAvailable";
  EXPECT_TRUE(run.host_memory->fits) << run.host_memory->reason;
  EXPECT_FALSE(run.fit.has_value());
  EXPECT_TRUE(refusal(run).empty());
  EXPECT_FALSE(to_json(run).contains("host_memory")) << "--print-config stays the same from call to call";
  EXPECT_NE(explain_text(run).find("  host memory: fits: predicted peak"), std::string::npos) << explain_text(run);

  const std::vector<std::string> huge = {"--stress", "memory", "--set", "memory_pressure_bytes=100000000000000"};
  const std::string ballast_refusal = config_error_of([&] { resolve_args(huge); });
  EXPECT_NE(ballast_refusal.find("does not fit the host's memory: predicted peak "), std::string::npos)
      << "a 100 TB ballast: '" << ballast_refusal << "'";
  // --print-config and --explain-stress show it, then refuse.
  std::vector<std::string> shown = huge;
  shown.push_back("--print-config");
  const RunConfig printed = resolve_args(shown);
  ASSERT_TRUE(printed.host_memory.has_value());
  EXPECT_FALSE(printed.host_memory->fits);
  EXPECT_NE(refusal(printed).find("does not fit the host's memory"), std::string::npos);
  // A posed GPU is fitted instead, never checked against the host.
  const RunConfig posed_gpu = resolve_args(
      {"--stress", "memory", "--device-memory", "1000TB", "--set", "memory_pressure_bytes=100000000000000"});
  EXPECT_FALSE(posed_gpu.host_memory.has_value());
  EXPECT_TRUE(posed_gpu.fit.has_value() && posed_gpu.fit->fits);
}

TEST(HostMemory, ReadsMemAvailableAndALowerCgroupLimit) {
  const auto dir = std::filesystem::temp_directory_path() / ("rcl-host-memory-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir / name) << text;
    return (dir / name).string();
  };
  const std::string meminfo =
      write("meminfo", "MemTotal:       24684096 kB\nMemFree:         1000000 kB\nMemAvailable:   21139688 kB\n");
  const auto plain = host_available_memory({.meminfo = meminfo, .cgroup_limits = {}});
  ASSERT_TRUE(plain.has_value());
  EXPECT_EQ(plain->available_bytes, int64_t{21139688} * 1024);
  EXPECT_NE(plain->source.find("MemAvailable"), std::string::npos);
  // cgroup v2 without a limit ("max"), v1's "unlimited" (a huge number), and a container's 8 GiB.
  const auto unlimited = host_available_memory(
      {.meminfo = meminfo, .cgroup_limits = {write("v2", "max\n"), write("v1", "9223372036854771712\n")}});
  EXPECT_EQ(unlimited->available_bytes, int64_t{21139688} * 1024);
  const auto limited = host_available_memory({.meminfo = meminfo, .cgroup_limits = {write("limit", "8589934592\n")}});
  EXPECT_EQ(limited->available_bytes, int64_t{8589934592});
  EXPECT_NE(limited->source.find("cgroup"), std::string::npos);
  // No MemAvailable (an old kernel, no /proc): nothing to check against.
  EXPECT_FALSE(host_available_memory({.meminfo = write("old", "MemTotal: 1 kB\n"), .cgroup_limits = {}}).has_value());
  EXPECT_FALSE(host_available_memory({.meminfo = (dir / "absent").string(), .cgroup_limits = {}}).has_value());
  std::filesystem::remove_all(dir);
}

}  // namespace RCL_UNITY_ID
}  // namespace
}  // namespace rcl
