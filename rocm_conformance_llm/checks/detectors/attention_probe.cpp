#include "rocm_conformance_llm/checks/detectors/attention_probe.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/version.h>

#include "rocm_conformance_llm/base/strings.hpp"
#include "rocm_conformance_llm/faults/faults.hpp"
#include "rocm_conformance_llm/loop/loop_access.hpp"
#include "rocm_conformance_llm/workload/precision.hpp"

namespace rcl {
namespace {

struct ProbeDtype {
  torch::ScalarType type;
  const char* name;
  double unit_roundoff;
};
const ProbeDtype kProbeDtypes[] = {
    {torch::kFloat, "fp32", 0x1p-24}, {torch::kBFloat16, "bf16", 0x1p-8}, {torch::kHalf, "fp16", 0x1p-11}};

// The first kProbeSequences sequences and kProbeHeads heads, tiled along T up to `seq_len`.
torch::Tensor probe_slice(torch::Tensor t, int64_t seq_len) {
  if (t.size(0) < kProbeSequences) t = t.repeat({kProbeSequences, 1, 1, 1});
  t = t.slice(0, 0, kProbeSequences).slice(1, 0, kProbeHeads);
  const int64_t seq = t.size(2);
  if (seq_len > seq) t = t.repeat({1, 1, (seq_len + seq - 1) / seq, 1}).narrow(2, 0, seq_len);
  return t.to(torch::kFloat).contiguous();
}

// One backend's output; throws c10::Error where the build or device has no such kernel.
torch::Tensor run_backend(const std::string& backend, const torch::Tensor& q, const torch::Tensor& k,
                          const torch::Tensor& v, const torch::Tensor& allowed, bool masked) {
  if (backend == "math") return explicit_attention(q, k, v, allowed);
  SdpaBackendScope scope(backend);
  return sdpa_attention(q, k, v, masked ? allowed : torch::Tensor());
}

// The backend the attention-mask-corrupt fault strikes: the last one that serves a small
// masked fp32 input here.
std::string corrupted_backend(const torch::Device& device, int64_t head_dim) {
  const auto opts = torch::TensorOptions().dtype(torch::kFloat).device(device);
  const auto x = torch::ones({kProbeSequences, 1, 8, head_dim}, opts);
  const auto allowed = padded_causal_mask(kProbeSequences, 8, kProbePadFraction, device);
  auto backends = attention_probe_backends();
  for (auto it = backends.rbegin(); it != backends.rend(); ++it) {
    try {
      run_backend(*it, x, x, x, allowed, true);
      return *it;
    } catch (const c10::Error&) {}
  }
  return "math";
}

}  // namespace

AttentionInputs capture_attention_inputs(GPT& model, const torch::Tensor& tokens) {
  torch::NoGradGuard no_grad;
  AutocastGuard fp32(tokens.device().type(), autocast_for(Precision::fp32));
  const bool was_training = model->is_training();
  model->eval();
  AttentionInputs out;
  model->blocks().at(0)->attn->capture_next(&out);
  try {
    model->forward(tokens);
  } catch (...) {
    model->blocks().at(0)->attn->capture_next(nullptr);
    model->train(was_training);
    throw;
  }
  model->train(was_training);
  return out;
}

double attention_bound(torch::ScalarType dtype, double max_abs_score, int64_t keys) {
  double u = 0x1p-53;
  for (const auto& d : kProbeDtypes)
    if (d.type == dtype) u = d.unit_roundoff;
  return 8.0 * u * (1.0 + max_abs_score) + 8.0 * std::sqrt(double(std::max<int64_t>(keys, 1))) * 0x1p-24;
}

std::vector<std::string> attention_probe_backends() {
  if (!sdpa_available()) return {"math"};
  return {"math", "sdpa_math", "sdpa_flash", "sdpa_mem_efficient"};
}

nlohmann::json AttentionProbeResult::to_json() const {
  nlohmann::json j = {{"backend", backend},     {"dtype", dtype},         {"masked", masked},
                      {"strided_v", strided_v}, {"supported", supported}, {"passed", passed()}};
  if (!supported) {
    j["reason"] = reason;
    return j;
  }
  j["nonfinite"] = nonfinite;
  j["max_error"] = json_number(max_error);
  j["bound"] = bound;
  if (injected) j["injected_fault"] = true;
  return j;
}

std::string AttentionProbeResult::describe() const {
  return fmt::format("{} {} {}, {} V", backend, dtype, masked ? "with padding mask" : "causal only",
                     strided_v ? "strided" : "contiguous");
}

PreparedAttentionProbe prepare_attention_probe(const AttentionInputs& inputs, const torch::Device& device,
                                               const AttentionProbeOptions& options) {
  torch::NoGradGuard no_grad;
  const auto q32 = probe_slice(inputs.q, options.seq_len);
  const auto k32 = probe_slice(inputs.k, options.seq_len);
  const auto v32 = probe_slice(inputs.v, options.seq_len);
  PreparedAttentionProbe p;
  p.device = device;
  p.seq = q32.size(2);
  p.head_dim = q32.size(3);
  p.pad_fraction = options.pad_fraction;
  const auto allowed_masks = [&](const torch::Device& where) {
    return std::pair{torch::ones({p.seq, p.seq}, torch::TensorOptions().dtype(torch::kBool).device(where)).tril(),
                     padded_causal_mask(kProbeSequences, p.seq, options.pad_fraction, where)};
  };
  const auto [causal_host, padded_host] = allowed_masks(torch::kCPU);
  std::tie(p.causal, p.padded) = allowed_masks(device);
  for (const auto& dtype : kProbeDtypes) {
    PreparedAttentionProbe::Case c{.dtype = dtype.type, .name = dtype.name};
    c.q = q32.to(device, dtype.type), c.k = k32.to(device, dtype.type), c.v = v32.to(device, dtype.type);
    // The reference sees the rounded inputs: only the kernel's own error is measured.
    const auto qd = c.q.to(torch::kCPU, torch::kDouble), kd = c.k.to(torch::kCPU, torch::kDouble);
    const auto vd = c.v.to(torch::kCPU, torch::kDouble);
    c.v_max = vd.abs().max().item<double>();
    const auto scores = torch::matmul(qd, kd.transpose(-2, -1)) / std::sqrt(double(qd.size(-1)));
    for (const bool masked : {false, true}) {
      const auto& allowed_host = masked ? padded_host : causal_host;
      c.reference[masked] = explicit_attention(qd, kd, vd, allowed_host);
      const double s_max = scores.masked_fill(allowed_host.logical_not(), 0.0).abs().max().item<double>();
      c.bound[masked] = attention_bound(dtype.type, s_max, p.seq) * c.v_max;
    }
    p.cases.push_back(std::move(c));
  }
  return p;
}

std::vector<AttentionProbeResult> run_attention_probe(const PreparedAttentionProbe& p, bool corrupt_masked) {
  torch::NoGradGuard no_grad;
  const std::string corrupt = corrupt_masked ? corrupted_backend(p.device, p.head_dim) : "";
  std::vector<AttentionProbeResult> results;
  for (const auto& c : p.cases) {
    for (const bool masked : {false, true}) {
      for (const bool strided : {false, true}) {
        const auto v_in = strided ? strided_view_of(c.v) : c.v;
        for (const auto& backend : attention_probe_backends()) {
          AttentionProbeResult r;
          r.backend = backend, r.dtype = c.name, r.masked = masked, r.strided_v = strided, r.bound = c.bound[masked];
          torch::Tensor out;
          try {
            out = run_backend(backend, c.q, c.k, v_in, masked ? p.padded : p.causal, masked);
          } catch (const c10::Error& e) {
            r.supported = false;
            r.reason = first_line(e.what_without_backtrace());
            results.push_back(std::move(r));
            continue;
          }
          auto got = out.to(torch::kCPU, torch::kDouble);
          if (masked && backend == corrupt) {
            // The padded sequence's rows past its length come out shifted, as a kernel that
            // mishandles the masked keys would give them.
            const int64_t from = std::min(padded_length(p.seq, p.pad_fraction), p.seq - 1);
            got.select(0, 1).narrow(1, from, p.seq - from).add_(c.v_max);
            r.injected = true;
          }
          r.nonfinite = !got.isfinite().all().item<bool>();
          r.max_error = (got - c.reference[masked]).abs().max().item<double>();
          results.push_back(std::move(r));
        }
      }
    }
  }
  return results;
}

std::vector<AttentionProbeResult> probe_attention(const AttentionInputs& inputs, const torch::Device& device,
                                                  const AttentionProbeOptions& options) {
  return run_attention_probe(prepare_attention_probe(inputs, device, options), options.corrupt_masked);
}

AttentionProbeOptions AttentionProbeOptions::from(const TrainingConfig& cfg, bool corrupt_masked) {
  return {.seq_len = cfg.attention_probe_seq_len,
          .pad_fraction = cfg.attention_pad_fraction > 0 ? cfg.attention_pad_fraction : kProbePadFraction,
          .corrupt_masked = corrupt_masked};
}

namespace {

std::string training_kernel_of(LoopAccess& loop, const AttentionInputs& in) {
  // Captured in fp32; the training call sees them in autocast's dtype (a cast keeps the strides).
  const auto autocast = autocast_for(loop.ctx().cfg.mixed_precision);
  const auto dtype = autocast.enabled ? autocast.dtype : torch::kFloat;
  return loop.model()->blocks().at(0)->attn->training_kernel(in.q.to(dtype), in.k.to(dtype), in.v.to(dtype));
}

}  // namespace

TrainerProbeInputs prepare_trainer_attention_probe(LoopAccess& loop) {
  // The probe reads kProbeSequences sequences: the forward that captures them needs no more.
  const auto& tokens = loop.train_batch(0).inputs;
  const AttentionInputs in =
      capture_attention_inputs(loop.model(), tokens.narrow(0, 0, std::min<int64_t>(tokens.size(0), kProbeSequences)));
  return {
      .prepared = prepare_attention_probe(in, loop.ctx().device, AttentionProbeOptions::from(loop.ctx().cfg, false)),
      .training_kernel = training_kernel_of(loop, in)};
}

TrainerAttentionProbe probe_trainer_attention(LoopAccess& loop, bool corrupt_masked) {
  auto inputs = prepare_trainer_attention_probe(loop);
  return {.results = run_attention_probe(inputs.prepared, corrupt_masked), .training_kernel = inputs.training_kernel};
}

std::string training_attention_kernel(LoopAccess& loop) {
  return training_kernel_of(loop, capture_attention_inputs(loop.model(), loop.train_batch(0).inputs.narrow(0, 0, 1)));
}

nlohmann::json attention_probe_report(LoopAccess& loop, const TrainerAttentionProbe& probe) {
  const TrainingConfig& c = loop.ctx().cfg;
  nlohmann::json rows = nlohmann::json::array();
  int64_t mismatches = 0;
  for (const auto& r : probe.results) {
    rows.push_back(r.to_json());
    mismatches += r.passed() ? 0 : 1;
  }
  return {{"probe", "attention"},
          {"device", loop.ctx().device.str()},
          {"libtorch", TORCH_VERSION},
          {"seq_len", std::max(c.attention_probe_seq_len, c.seq_len)},
          {"pad_fraction", AttentionProbeOptions::from(c, false).pad_fraction},
          {"backends", attention_probe_backends()},
          {"training_kernel", probe.training_kernel},
          {"results", std::move(rows)},
          {"mismatches", mismatches},
          {"passed", mismatches == 0}};
}

AttentionProbeCheck::AttentionProbeCheck(const DiagnosticsConfig& cfg, FindingLog& log, LoopAccess& loop,
                                         const FaultPlan* faults)
    : Detector(cfg, log), loop_(loop), faults_(faults) {}

void AttentionProbeCheck::preflight() { probe(0, loop_.rank()); }

void AttentionProbeCheck::between_steps(int64_t step) {
  if (step % loop_.ctx().cfg.attention_probe_interval != 0) return;
  loop_.enter_phase(phase::attention_probe, step);
  probe(step, loop_.rank());
}

void AttentionProbeCheck::probe(int64_t step, int rank) {
  const TrainingConfig& c = loop_.ctx().cfg;
  const torch::Device& device = loop_.ctx().device;
  const bool corrupt = faults_ && faults_->fires(FaultKind::attention_mask_corrupt, step, rank);
  const int64_t seq = std::max(c.attention_probe_seq_len, c.seq_len);
  if (!inputs_) inputs_ = prepare_trainer_attention_probe(loop_);
  const auto results = run_attention_probe(inputs_->prepared, corrupt);
  const std::string& training_kernel = inputs_->training_kernel;
  const auto supported = std::count_if(results.begin(), results.end(), [](const auto& r) { return r.supported; });
  const auto outside = std::count_if(results.begin(), results.end(), [](const auto& r) { return !r.passed(); });
  spdlog::info(
      "attention probe at step {}: {} backend/dtype/mask/layout cases run ({} without a kernel here), {} "
      "outside their bound; training attention runs on the {} kernel",
      step, supported, int64_t(results.size()) - supported, outside, training_kernel);
  for (const auto& r : results) {
    if (r.passed() || !reported_.insert(r.describe()).second) continue;
    nlohmann::json evidence = r.to_json();
    evidence["device"] = device.str();
    evidence["seq_len"] = seq;
    log().add(Finding{
        .component = component::attention,
        .signature = "attention_backend_mismatch",
        .severity = Severity::fail,
        .step = step,
        .rank = rank,
        .message =
            fmt::format("attention {} on {}: {} (bound {:.3g}) vs float64 math, seq_len {}", r.describe(), device.str(),
                        r.nonfinite ? std::string("non-finite output") : fmt::format("max error {:.3g}", r.max_error),
                        r.bound, seq),
        .evidence = std::move(evidence)});
  }
}

}  // namespace rcl
