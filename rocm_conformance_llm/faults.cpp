#include "rocm_conformance_llm/faults.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <chrono>
#include <limits>
#include <thread>
#include <tuple>

#include <fmt/format.h>

#include "rocm_conformance_llm/errors.hpp"
#include "rocm_conformance_llm/utils/strings.hpp"

namespace rcl {

namespace {

enum class FaultValue { none, seconds, bytes };

struct FaultTraits {
  FaultKind kind;
  const char* name;
  bool needs_step;   // one-shot at exactly that step; otherwise persistent from it (default 1)
  FaultValue value;
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
    FaultTraits{FaultKind::slow_collective, "slow-collective", true, FaultValue::seconds},
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
// loss-spike: logits this many times larger make the model confidently wrong for one step.
constexpr double kLossSpikeLogitScale = 20.0;
// grad-bitflip: the top exponent bit of a float32 (multiplies a value below 2 by 2^128).
constexpr int32_t kFloatExponentTopBit = 1 << 30;

const FaultTraits& traits(FaultKind kind) { return kFaults[static_cast<size_t>(kind)]; }

[[noreturn]] void bad_spec(std::string_view spec, const std::string& why) {
  throw ConfigError(fmt::format("--inject: bad fault spec '{}': {}. {}", spec, why, fault_syntax_help()));
}

int64_t parse_integer(std::string_view spec, std::string_view text, const char* what, int64_t min) {
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < min)
    bad_spec(spec, fmt::format("{} must be an integer >= {}, got '{}'", what, min, text));
  return v;
}

double parse_positive(std::string_view spec, std::string_view text, const char* what) {
  // std::from_chars for double is available in GCC 11+.
  double v = 0.0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || !(v > 0.0) || !std::isfinite(v))
    bad_spec(spec, fmt::format("{} must be a positive number, got '{}'", what, text));
  return v;
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
      out.step = parse_integer(spec, number, "@step", 1);
    } else if (key == "rank") {
      if (out.rank) bad_spec(spec, "@rank is given twice");
      out.rank = static_cast<int>(parse_integer(spec, number, "@rank", 0));
    } else {
      bad_spec(spec, fmt::format("unknown selector '@{}' (allowed: @step=N, @rank=R)", key));
    }
  }

  if (t.needs_step && !out.step) bad_spec(spec, fmt::format("'{}' needs @step=N", t.name));
  if (t.value == FaultValue::bytes && !value_seen) out.bytes_per_step = kDefaultLeakBytesPerStep;
  return out;
}

auto order_key(const FaultSpec& s) { return std::tuple(s.kind, s.step.value_or(0), s.rank.value_or(-1)); }

}  // namespace

std::string fault_name(FaultKind kind) { return traits(kind).name; }

std::string fault_syntax_help() {
  std::string names;
  for (const auto& t : kFaults) names += (names.empty() ? "" : ", ") + std::string(t.name);
  return "Known faults: " + names +
         ". Syntax: NAME[=VALUE][@step=N][@rank=R], comma-separated, e.g. nan@step=20, "
         "grad-bitflip@step=30, loss-spike@step=25, slow-step@step=15=0.5, memory-leak=8MiB/step, "
         "rng-skew@rank=1, hang@step=40, gemm-corrupt, attention-mask-corrupt, slow-collective=3@step=30 (nan, "
         "grad-bitflip, loss-spike, hang and slow-collective need @step)";
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
      throw ConfigError(fmt::format("--inject: '{}' and '{}' conflict (same fault, step and rank, "
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

namespace {

// hang: the rank stops making progress, as after a lost completion signal (rocm-systems#7896).
// Only the watchdog thread can end the run now.
[[noreturn]] void hang_forever() {
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}

// grad-bitflip: flips the top exponent bit of the largest-magnitude element below 2, a flipped
// bit in a reduction buffer or in memory. The value grows by 2^128; it stays finite or becomes
// Inf depending on the device's norm accumulation. Device-side: no host read.
void flip_exponent_bit(const torch::Tensor& grad) {
  torch::NoGradGuard no_grad;
  TORCH_CHECK(grad.scalar_type() == torch::kFloat, "grad-bitflip: float32 gradients expected");
  const auto flat = grad.view(-1);
  const auto magnitude = flat.abs();
  const auto index = torch::where(magnitude < 2.0, magnitude, torch::zeros_like(magnitude)).argmax();
  auto bits = flat.view(torch::kInt);
  bits.index_put_({index}, bits.index({index}).bitwise_xor(kFloatExponentTopBit));
}

// nan: the weight that block 0's FFN down projection reads as NaN for one forward, so the block
// writes NaN from finite inputs, as a GEMM that left its output unwritten does
// (rocm-libraries#9055). Written through .data(): autograd's version counter must not see it,
// so backward still runs (and spreads the NaN, as the real failure would).
torch::Tensor nan_target(GPT& model) { return model->blocks().front()->mlp->down->weight.data()[0][0]; }

}  // namespace

FaultInjector::FaultInjector(const FaultPlan& plan, int rank, GPT model, torch::Device device)
    : plan_(plan), rank_(rank), model_(std::move(model)), device_(device) {}

const FaultSpec* FaultInjector::active(FaultKind kind, int64_t step) const {
  return plan_.requested(kind) ? plan_.active(kind, step, rank_) : nullptr;
}

void FaultInjector::before_forward(int64_t step, bool first) {
  if (!first) return;
  if (active(FaultKind::hang, step)) hang_forever();
  if (active(FaultKind::nan, step)) {
    auto weight = nan_target(model_);
    nan_saved_ = weight.clone();
    weight.fill_(std::numeric_limits<double>::quiet_NaN());
  }
}

torch::Tensor FaultInjector::on_logits(torch::Tensor logits, int64_t step) {
  if (nan_saved_.defined()) {  // the NaN lasted for one forward
    nan_target(model_).copy_(nan_saved_);
    nan_saved_ = torch::Tensor();
  }
  return active(FaultKind::loss_spike, step) ? logits * kLossSpikeLogitScale : logits;
}

void FaultInjector::on_gradients(int64_t step, const std::vector<torch::Tensor>& params,
                                 const torch::Tensor& /*loss_sum*/, int64_t /*first_micro_batch*/) {
  if (active(FaultKind::grad_bitflip, step)) flip_exponent_bit(params.front().grad());
}

void FaultInjector::before_step_time(StepRecord& rec, double elapsed_s) {
  if (const FaultSpec* slow = active(FaultKind::slow_step, rec.step)) {
    // Without SECONDS the step takes 3x its own time on any hardware: a performance cliff.
    std::this_thread::sleep_for(std::chrono::duration<double>(slow->seconds > 0 ? slow->seconds : 2.0 * elapsed_s));
  }
  const FaultSpec* late = active(FaultKind::slow_collective, rec.step);
  if (!late || rec.collectives.empty()) return;
  // The step waits for the all-reduce's completion: its time, and the collective's, grow by it.
  const double delay_s = late->seconds > 0 ? late->seconds : 10.0 * elapsed_s;
  std::this_thread::sleep_for(std::chrono::duration<double>(delay_s));
  rec.collectives.back().seconds += delay_s;
}

void FaultInjector::after_step_time(StepRecord& rec) {
  const FaultSpec* leak = active(FaultKind::memory_leak, rec.step);
  if (!leak) return;
  // Filled, so the pages are really committed (RSS on CPU, allocated bytes on a GPU).
  leaked_.push_back(
      torch::empty({leak->bytes_per_step}, torch::TensorOptions().dtype(torch::kUInt8).device(device_)).fill_(1));
}

}  // namespace rcl
