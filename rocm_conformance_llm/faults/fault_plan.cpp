#include "rocm_conformance_llm/faults/fault_plan.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <csignal>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "rocm_conformance_llm/base/errors.hpp"
#include "rocm_conformance_llm/base/strings.hpp"
#include "rocm_conformance_llm/loop/step_hooks.hpp"

namespace rcl {

namespace {

enum class FaultValue { none, seconds, bytes };

struct FaultTraits {
  FaultKind kind;
  const char* name;
  bool needs_step;  // one-shot at exactly that step; otherwise persistent from it (default 1)
  FaultValue value;
  bool needs_phase = false;  // strikes on entering the phase named by @phase=P
};

constexpr std::array kFaults = {
    FaultTraits{FaultKind::nan, "nan", true, FaultValue::none},
    FaultTraits{FaultKind::grad_bitflip, "grad-bitflip", true, FaultValue::none},
    FaultTraits{FaultKind::loss_spike, "loss-spike", true, FaultValue::none},
    FaultTraits{FaultKind::slow_step, "slow-step", false, FaultValue::seconds},
    FaultTraits{FaultKind::memory_leak, "memory-leak", false, FaultValue::bytes},
    FaultTraits{FaultKind::rng_skew, "rng-skew", false, FaultValue::none},
    FaultTraits{FaultKind::hang, "hang", true, FaultValue::none},
    FaultTraits{FaultKind::gemm_corrupt, "gemm-corrupt", false, FaultValue::none},
    FaultTraits{FaultKind::attention_mask_corrupt, "attention-mask-corrupt", false, FaultValue::none},
    FaultTraits{FaultKind::rank_stop, "rank-stop", false, FaultValue::none, true},
    FaultTraits{FaultKind::logits_nan_once, "logits-nan-once", true, FaultValue::none},
    FaultTraits{FaultKind::logits_nan, "logits-nan", false, FaultValue::none},
    FaultTraits{FaultKind::slow_collective, "slow-collective", true, FaultValue::seconds},
    FaultTraits{FaultKind::gemm_corrupt_once, "gemm-corrupt-once", true, FaultValue::none},
    FaultTraits{FaultKind::rng_skew_once, "rng-skew-once", true, FaultValue::none},
    FaultTraits{FaultKind::collective_corrupt, "collective-corrupt", false, FaultValue::none},
    FaultTraits{FaultKind::collective_hang, "collective-hang", true, FaultValue::none},
    FaultTraits{FaultKind::slow_all_to_all, "slow-all-to-all", false, FaultValue::seconds},
    FaultTraits{FaultKind::gemm_output_corrupt, "gemm-output-corrupt", true, FaultValue::none},
};
// Indexed by FaultKind: every kind has its row, in enum order (checked when compiling).
constexpr bool table_follows_enum() {
  if (kFaults.size() != static_cast<size_t>(FaultKind::count)) return false;
  for (size_t i = 0; i < kFaults.size(); ++i)
    if (static_cast<size_t>(kFaults[i].kind) != i) return false;
  return true;
}
static_assert(table_follows_enum(), "kFaults must have one row per FaultKind, in enum order");

constexpr int64_t kDefaultLeakBytesPerStep = int64_t{8} << 20;

const FaultTraits& traits(FaultKind kind) { return kFaults[static_cast<size_t>(kind)]; }

[[noreturn]] void bad_spec(std::string_view spec, const std::string& why) {
  throw ConfigError(fmt::format("--inject: bad fault spec '{}': {}. {}", spec, why, fault_syntax_help()));
}

int64_t parse_at_least(std::string_view spec, std::string_view text, const char* what, int64_t min) {
  const auto v = parse_number<int64_t>(text);
  if (!v || *v < min) bad_spec(spec, fmt::format("{} must be an integer >= {}, got '{}'", what, min, text));
  return *v;
}

double parse_positive(std::string_view spec, std::string_view text, const char* what) {
  const auto v = parse_number<double>(text);
  if (!v || !(*v > 0.0) || !std::isfinite(*v))
    bad_spec(spec, fmt::format("{} must be a positive number, got '{}'", what, text));
  return *v;
}

double parse_seconds(std::string_view spec, std::string_view text) {
  if (!text.empty() && text.back() == 's') text.remove_suffix(1);
  return parse_positive(spec, text, "SECONDS");
}

int64_t parse_bytes(std::string_view spec, std::string_view text) {
  if (text.ends_with("/step")) text.remove_suffix(5);
  static constexpr std::array<std::pair<std::string_view, double>, 4> kUnits = {
      {{"KiB", 1024.0}, {"MiB", 1024.0 * 1024}, {"GiB", 1024.0 * 1024 * 1024}, {"B", 1.0}}};
  double scale = 1.0;
  for (const auto& [suffix, factor] : kUnits) {
    if (text.ends_with(suffix)) {
      text.remove_suffix(suffix.size());
      scale = factor;
      break;
    }
  }
  const double bytes = parse_positive(spec, text, "SIZE (a number with B, KiB, MiB or GiB)") * scale;
  if (bytes < 1.0) bad_spec(spec, "SIZE is below one byte");
  return static_cast<int64_t>(bytes);
}

const FaultTraits& traits_by_name(std::string_view spec, std::string_view name) {
  for (const auto& t : kFaults)
    if (name == t.name) return t;
  bad_spec(spec, fmt::format("unknown fault '{}'", name));
}

void apply_value(std::string_view spec, const FaultTraits& t, std::string_view value, FaultSpec& out,
                 bool& value_seen) {
  if (value_seen) bad_spec(spec, "the value is given twice");
  value_seen = true;
  switch (t.value) {
    case FaultValue::none: bad_spec(spec, fmt::format("'{}' takes no value", t.name));
    case FaultValue::seconds: out.seconds = parse_seconds(spec, value); break;
    case FaultValue::bytes: out.bytes_per_step = parse_bytes(spec, value); break;
  }
}

FaultSpec parse_one(std::string_view spec) {
  std::vector<std::string_view> parts;
  for (size_t start = 0;;) {
    const size_t at = spec.find('@', start);
    parts.push_back(spec.substr(start, at == std::string_view::npos ? at : at - start));
    if (at == std::string_view::npos) break;
    start = at + 1;
  }
  const std::string_view head = parts.front();
  const size_t eq = head.find('=');
  const FaultTraits& t = traits_by_name(spec, head.substr(0, eq));
  FaultSpec out;
  out.kind = t.kind;
  bool value_seen = false;
  if (eq != std::string_view::npos) apply_value(spec, t, head.substr(eq + 1), out, value_seen);

  for (size_t i = 1; i < parts.size(); ++i) {
    const std::string_view sel = parts[i];
    const size_t first_eq = sel.find('=');
    if (first_eq == std::string_view::npos) bad_spec(spec, fmt::format("selector '@{}' has no '='", sel));
    const std::string_view key = sel.substr(0, first_eq);
    std::string_view number = sel.substr(first_eq + 1);
    const size_t second_eq = number.find('=');
    if (second_eq != std::string_view::npos) {  // @step=15=0.5: the fault's value rides along
      apply_value(spec, t, number.substr(second_eq + 1), out, value_seen);
      number = number.substr(0, second_eq);
    }
    if (key == "step") {
      if (out.step) bad_spec(spec, "@step is given twice");
      out.step = parse_at_least(spec, number, "@step", 1);
    } else if (key == "rank") {
      if (out.rank) bad_spec(spec, "@rank is given twice");
      out.rank = static_cast<int>(parse_at_least(spec, number, "@rank", 0));
    } else if (key == "phase" && t.needs_phase) {
      if (!out.phase.empty()) bad_spec(spec, "@phase is given twice");
      const auto& phases = phase::rank_stop_phases;
      if (std::find(phases.begin(), phases.end(), number) == phases.end())
        bad_spec(spec, fmt::format("unknown phase '{}' (allowed: {})", number, fmt::join(phases, ", ")));
      out.phase = number;
    } else {
      bad_spec(spec, fmt::format("unknown selector '@{}' (allowed: @step=N, @rank=R{})", key,
                                 t.needs_phase ? ", @phase=P" : ""));
    }
  }

  if (t.needs_step && !out.step) bad_spec(spec, fmt::format("'{}' needs @step=N", t.name));
  if (t.needs_phase && out.phase.empty()) bad_spec(spec, fmt::format("'{}' needs @phase=P", t.name));
  if (t.value == FaultValue::bytes && !value_seen) out.bytes_per_step = kDefaultLeakBytesPerStep;
  return out;
}

auto order_key(const FaultSpec& s) { return std::tuple(s.kind, s.step.value_or(0), s.rank.value_or(-1), s.phase); }

}  // namespace

std::string fault_name(FaultKind kind) { return traits(kind).name; }

std::string fault_syntax_help() {
  std::string names, with_step;
  for (const auto& t : kFaults) {
    names += (names.empty() ? "" : ", ") + std::string(t.name);
    if (t.needs_step) with_step += (with_step.empty() ? "" : ", ") + std::string(t.name);
  }
  return "Known faults: " + names +
         ". Syntax: NAME[=VALUE][@step=N][@rank=R], comma-separated, e.g. nan@step=20, "
         "grad-bitflip@step=30, loss-spike@step=25, slow-step@step=15=0.5, memory-leak=8MiB/step, "
         "rng-skew@rank=1, hang@step=40, gemm-corrupt, gemm-corrupt-once@step=5, attention-mask-corrupt, "
         "rank-stop@phase=grad_sync@rank=1, logits-nan-once@step=12, logits-nan@step=12, "
         "slow-collective=3@step=30, collective-corrupt@rank=1, collective-hang@step=10@rank=1, "
         "slow-all-to-all=0.5@rank=1, gemm-output-corrupt@step=5 (" +
         with_step + " need @step; rank-stop needs @phase)";
}

std::string FaultSpec::to_string() const {
  std::string s = fault_name(kind);
  switch (traits(kind).value) {
    case FaultValue::none: break;
    case FaultValue::seconds:
      if (seconds > 0) s += fmt::format("={:g}", seconds);
      break;
    case FaultValue::bytes:
      s += bytes_per_step % (1 << 20) == 0 ? fmt::format("={}MiB/step", bytes_per_step >> 20)
                                           : fmt::format("={}B/step", bytes_per_step);
      break;
  }
  if (!phase.empty()) s += "@phase=" + phase;
  if (step) s += fmt::format("@step={}", *step);
  if (rank) s += fmt::format("@rank={}", *rank);
  return s;
}

FaultPlan FaultPlan::parse(std::string_view text) {
  FaultPlan plan;
  if (trim(text).empty()) return plan;
  for (size_t start = 0;;) {
    const size_t comma = text.find(',', start);
    const std::string spec = trim(text.substr(start, comma == std::string_view::npos ? comma : comma - start));
    if (spec.empty()) bad_spec(text, "empty entry in the comma-separated list");
    plan.specs_.push_back(parse_one(spec));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  auto& specs = plan.specs_;
  std::sort(specs.begin(), specs.end(), [](const FaultSpec& a, const FaultSpec& b) {
    return std::tuple(order_key(a), a.seconds, a.bytes_per_step) <
           std::tuple(order_key(b), b.seconds, b.bytes_per_step);
  });
  specs.erase(std::unique(specs.begin(), specs.end()), specs.end());
  for (size_t i = 1; i < specs.size(); ++i)
    if (order_key(specs[i]) == order_key(specs[i - 1]))
      throw ConfigError(
          fmt::format("--inject: '{}' and '{}' conflict (same fault, step and rank, "
                      "different values)",
                      specs[i - 1].to_string(), specs[i].to_string()));
  for (const auto& s : specs) plan.kinds_mask_ |= 1u << static_cast<unsigned>(s.kind);
  return plan;
}

const FaultSpec* FaultPlan::active(FaultKind kind, int64_t step, int rank) const {
  const bool one_shot = traits(kind).needs_step;
  const FaultSpec* match = nullptr;  // specs are sorted by step: the latest-starting one wins
  for (const auto& s : specs_) {
    if (s.kind != kind || (s.rank && *s.rank != rank)) continue;
    const int64_t from = s.step.value_or(1);
    if (one_shot ? step == from : step >= from) match = &s;
  }
  return match;
}

void FaultPlan::stop_rank_if_planned(std::string_view phase, int64_t step, int rank) const {
  if (!requested(FaultKind::rank_stop)) return;
  for (const auto& s : specs_) {
    if (s.kind != FaultKind::rank_stop || s.phase != phase || (s.rank && *s.rank != rank) ||
        (s.step && *s.step != step))
      continue;
    spdlog::default_logger()->flush();
    // The whole process freezes, every thread with it (heartbeats too), sockets left open: the
    // hardest loss for the peers, which see no EOF, only silence.
    std::raise(SIGSTOP);
    return;
  }
}

std::string FaultPlan::to_string() const {
  std::string out;
  for (const auto& s : specs_) out += (out.empty() ? "" : ",") + s.to_string();
  return out;
}

nlohmann::json FaultPlan::to_json() const {
  auto list = nlohmann::json::array();
  for (const auto& s : specs_) list.push_back(s.to_string());
  return list;
}

}  // namespace rcl
