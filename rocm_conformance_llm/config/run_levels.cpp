// The run levels as data, and their lookup by number.
#include "rocm_conformance_llm/config/run_levels.hpp"

#include "rocm_conformance_llm/base/errors.hpp"
#include "rocm_conformance_llm/base/strings.hpp"

namespace rcl {

namespace {
// Steps high enough that max_duration_s is what ends a timed level.
constexpr int64_t kUntilTimeUp = 1'000'000'000;

// Check intervals grow with the level: a CI gate looks often at a short run, a soak less often
// at a long one (a canary every 50 steps of an 8-hour run would be thousands of GEMM checks).
std::vector<RunLevel> make_run_levels() {
  return {
      {1,
       "quick",
       "CI gate, about 2 minutes: the preset's model, no stress mode, every check early",
       "",
       "",
       {{"training", {{"steps", kUntilTimeUp}, {"max_duration_s", 120.0}}},
        {"diagnostics", {{"gemm_canary_interval", 25}, {"fingerprint_interval", 25}, {"telemetry_interval_s", 2.0}}}}},
      {2,
       "standard",
       "15 minutes: GEMM, RNG and collective stress",
       "",
       "gemm,rng,comm",
       {{"training", {{"steps", kUntilTimeUp}, {"max_duration_s", 900.0}, {"checksum_interval", 10}}},
        {"diagnostics",
         {{"gemm_canary_interval", 100}, {"fingerprint_interval", 100}, {"telemetry_interval_s", 5.0}}}}},
      {3,
       "extended",
       "1 hour: every stress mode",
       "",
       "all",
       {{"training", {{"steps", kUntilTimeUp}, {"max_duration_s", 3600.0}, {"checksum_interval", 20}}},
        {"diagnostics",
         {{"gemm_canary_interval", 200}, {"fingerprint_interval", 200}, {"telemetry_interval_s", 10.0}}}}},
      {4,
       "soak",
       "8 hours: every stress mode, sparse checks (the hangs seen after hours)",
       "",
       "all",
       {{"training", {{"steps", kUntilTimeUp}, {"max_duration_s", 8 * 3600.0}, {"checksum_interval", 50}}},
        {"diagnostics",
         {{"gemm_canary_interval", 500}, {"fingerprint_interval", 500}, {"telemetry_interval_s", 30.0}}}}},
  };
}
}  // namespace

const std::vector<RunLevel>& run_levels() {
  static const std::vector<RunLevel> all = make_run_levels();
  return all;
}

const RunLevel& find_run_level(int level) {
  std::vector<std::string> known;
  for (const auto& l : run_levels()) {
    if (l.level == level) return l;
    known.push_back(std::to_string(l.level) + " (" + l.name + ")");
  }
  throw ConfigError("invalid --level " + std::to_string(level) + ": allowed levels are " + join(known));
}

}  // namespace rcl
