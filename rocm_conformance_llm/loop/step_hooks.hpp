// The points of a training step where diagnostics and fault injection act. Trainer::train_step
// calls them in the order below; every hook is a no-op by default, so an implementation
// overrides only the points it needs, and the loop trains identically with no hooks at all.
//
// Implementations: the watchdog (on_phase), the --inject faults (faults/faults.hpp: strike where the
// real failure strikes), and the loop-side checks of checks/ (op fingerprint, non-finite
// localisation, GEMM canary, shadow check, rewind-and-replay, the host-read count).
#pragma once

#include <array>
#include <bitset>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <torch/torch.h>

#include "rocm_conformance_llm/loop/step_record.hpp"

namespace rcl {

// The phase names, one vocabulary for everyone who passes or reads them: the loop and the checks
// report them through StepHooks::on_phase, the watchdog and heartbeat.json show them, a hang is
// attributed by them, `--inject rank-stop@phase=P` names them.
namespace phase {
inline constexpr const char* data = "data";
inline constexpr const char* forward = "forward";
inline constexpr const char* backward = "backward";
inline constexpr const char* grad_sync = "grad_sync";  // gradient all-reduce (RCCL)
inline constexpr const char* checksum = "checksum";    // cross-rank parameter checksum (RCCL)
inline constexpr const char* optimizer = "optimizer";
inline constexpr const char* eval = "eval";
inline constexpr const char* canary = "canary";
inline constexpr const char* attention_probe = "attention_probe";  // SDPA backends vs float64 math
inline constexpr const char* replay = "replay";                    // rewind-and-replay check (rng mode)
inline constexpr const char* rerun = "rerun";  // an anomalous step run again (checks/detectors/anomaly_rerun.hpp)
inline constexpr const char* loss_allreduce = "allreduce_loss";  // the step's mean loss (RCCL)
// Before the loop (the runner, not the trainer, passes these): the c10d store exchange that
// forms the group, and the detectors' cross-rank preflight (broadcast, all-reduce canary).
inline constexpr const char* rendezvous = "rendezvous";
inline constexpr const char* preflight = "preflight";
// Between steps: a training checkpoint being written (run/run_checkpoint.hpp).
inline constexpr const char* checkpoint = "checkpoint";
// The phases a rank-stop fault may strike in.
inline constexpr std::array rank_stop_phases = {rendezvous,      preflight, data,      forward,       backward,
                                                grad_sync,       checksum,  optimizer, eval,          canary,
                                                attention_probe, replay,    rerun,     loss_allreduce};
// A collective phase: a hang there is attributed to RCCL, anywhere else to the HIP runtime.
// grad_sync, checksum, and anything named "collective..." / "allreduce..." / "barrier...".
inline bool is_collective(std::string_view p) {
  return p == grad_sync || p == checksum || p.starts_with("collective") || p.starts_with("allreduce") ||
         p.starts_with("barrier");
}
}  // namespace phase

class StepHooks {
 public:
  virtual ~StepHooks() = default;

  // The loop entered `phase` of `step`. `collectives`: at the optimizer phase, the step's
  // gradient all-reduces (the watchdog names the last one in a hang); empty at other phases.
  virtual void on_phase(const char* /*phase*/, int64_t /*step*/, const std::vector<CollectiveSample>& /*collectives*/) {
  }
  // Before any work of optimizer step `step`.
  virtual void on_step_begin(int64_t /*step*/) {}
  // Before each micro-batch's forward (inside autocast); `first` is the step's first micro-batch.
  virtual void before_forward(int64_t /*step*/, bool /*first*/) {}
  // The forward's logits, before the loss: a hook may return other logits. Called once per chunk
  // of tokens the LM head computes (workload/lm_head.hpp), in order; the first is the first
  // tokens' logits [tokens, padded vocabulary].
  virtual torch::Tensor on_logits(torch::Tensor logits, int64_t /*step*/) { return logits; }
  // Gradients are final (averaged across ranks, still loss-scaled under fp16), the optimizer has
  // not run. `params` in the optimizer's buffer order; `loss_sum`: the micro-batches' summed
  // loss, on the device; `first_micro_batch`: the data cursor of the step's first micro-batch.
  virtual void on_gradients(int64_t /*step*/, const std::vector<torch::Tensor>& /*params*/,
                            const torch::Tensor& /*loss_sum*/, int64_t /*first_micro_batch*/) {}
  // The step's work is queued; its time is about to be taken (`elapsed_s` so far) and its memory
  // sampled after that: what a hook does here counts in both (a slow step, a leak).
  virtual void before_step_time(StepRecord& /*rec*/, double /*elapsed_s*/) {}
  // Step `step`'s loss reached the host (one step late) as this rank's `local_loss`.
  virtual void on_loss(int64_t /*step*/, double /*local_loss*/) {}
  // The published record is complete (the mean loss across ranks included) and the observers
  // have not seen it yet: a check may add what only it measures (host_reads).
  virtual void before_publish(StepRecord& /*rec*/) {}
  // Between optimizer steps, outside any step's time: `step` is done (its record not yet
  // published), nothing of the next step has run. Where checks that re-drive the loop (replay,
  // re-run) or probe the device on their own inputs (GEMM canary, attention probe) act.
  virtual void between_steps(int64_t /*step*/) {}
};

// The points of a step where a part can act, in the order a step reaches them (the phases,
// announced through on_phase, sit between them as step_schedule() lists): --explain-step prints,
// for a resolved run, which part acts at each.
enum class HookPoint {
  step_begin,        // StepHooks::on_step_begin
  phase,             // StepHooks::on_phase, at every phase
  before_forward,    // StepHooks::before_forward, each micro-batch
  logits,            // StepHooks::on_logits, each chunk of the LM head's logits
  gradients,         // StepHooks::on_gradients
  before_step_time,  // StepHooks::before_step_time
  loss,              // StepHooks::on_loss, one step late
  before_publish,    // StepHooks::before_publish
  published,         // StepObserver::on_step
  between_steps,     // StepHooks::between_steps
};
inline constexpr std::size_t kHookPoints = 10;
using HookPoints = std::bitset<kHookPoints>;

// One line of a step's schedule: a point where parts act, or a phase of the step's own work.
struct ScheduleLine {
  std::string_view what;             // the point's or the phase's name
  std::string_view when;             // where it is in the step
  int depth = 0;                     // 1: inside the micro-batch loop
  const HookPoint* point = nullptr;  // null: the step's own work (its phase announced at `phase`)
};
// Trainer::train_step and Trainer::run, top to bottom (a test holds the trainer to it).
std::span<const ScheduleLine> step_schedule();

namespace detail {
template <typename Member>
struct member_owner;
template <typename Class, typename Type>
struct member_owner<Type Class::*> {
  using type = Class;
};
// Whether a part's member `Member` (a pointer to it, typed by the class that last declared it)
// is declared below every class in `NoOps`: an override of their no-op.
template <typename Member, typename... NoOps>
inline constexpr bool declared_below = (!std::is_same_v<typename member_owner<Member>::type, NoOps> && ...);
}  // namespace detail

// Where a part of class `Part` acts, read from its type: the hook points it overrides, and
// `published` when it observes steps. `NoOps`: further bases whose members do nothing (a
// detector's base observes nothing). Computed, not declared, so it cannot drift from the code.
template <typename Part, typename... NoOps>
HookPoints hook_points_of() {
  using detail::declared_below;
  HookPoints p;
  if constexpr (std::is_base_of_v<StepHooks, Part>) {
    p[size_t(HookPoint::step_begin)] = declared_below<decltype(&Part::on_step_begin), StepHooks, NoOps...>;
    p[size_t(HookPoint::phase)] = declared_below<decltype(&Part::on_phase), StepHooks, NoOps...>;
    p[size_t(HookPoint::before_forward)] = declared_below<decltype(&Part::before_forward), StepHooks, NoOps...>;
    p[size_t(HookPoint::logits)] = declared_below<decltype(&Part::on_logits), StepHooks, NoOps...>;
    p[size_t(HookPoint::gradients)] = declared_below<decltype(&Part::on_gradients), StepHooks, NoOps...>;
    p[size_t(HookPoint::before_step_time)] = declared_below<decltype(&Part::before_step_time), StepHooks, NoOps...>;
    p[size_t(HookPoint::loss)] = declared_below<decltype(&Part::on_loss), StepHooks, NoOps...>;
    p[size_t(HookPoint::before_publish)] = declared_below<decltype(&Part::before_publish), StepHooks, NoOps...>;
    p[size_t(HookPoint::between_steps)] = declared_below<decltype(&Part::between_steps), StepHooks, NoOps...>;
  }
  if constexpr (std::is_base_of_v<StepObserver, Part>)
    p[size_t(HookPoint::published)] = declared_below<decltype(&Part::on_step), StepObserver, NoOps...>;
  return p;
}

// Calls each hook in the order added (faults before checks, so a check sees the fault).
class StepHookList final : public StepHooks {
 public:
  void add(StepHooks* hooks) { hooks_.push_back(hooks); }

  void on_phase(const char* phase, int64_t step, const std::vector<CollectiveSample>& collectives) override {
    for (auto* h : hooks_) h->on_phase(phase, step, collectives);
  }
  void on_step_begin(int64_t step) override {
    for (auto* h : hooks_) h->on_step_begin(step);
  }
  void before_forward(int64_t step, bool first) override {
    for (auto* h : hooks_) h->before_forward(step, first);
  }
  torch::Tensor on_logits(torch::Tensor logits, int64_t step) override {
    for (auto* h : hooks_) logits = h->on_logits(std::move(logits), step);
    return logits;
  }
  void on_gradients(int64_t step, const std::vector<torch::Tensor>& params, const torch::Tensor& loss_sum,
                    int64_t first_micro_batch) override {
    for (auto* h : hooks_) h->on_gradients(step, params, loss_sum, first_micro_batch);
  }
  void before_step_time(StepRecord& rec, double elapsed_s) override {
    for (auto* h : hooks_) h->before_step_time(rec, elapsed_s);
  }
  void on_loss(int64_t step, double local_loss) override {
    for (auto* h : hooks_) h->on_loss(step, local_loss);
  }
  void before_publish(StepRecord& rec) override {
    for (auto* h : hooks_) h->before_publish(rec);
  }
  void between_steps(int64_t step) override {
    for (auto* h : hooks_) h->between_steps(step);
  }

 private:
  std::vector<StepHooks*> hooks_;
};

}  // namespace rcl
