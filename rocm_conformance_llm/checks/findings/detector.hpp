// A detector watches a run for one family of failure signatures and records findings
// attributed to the ROCm component behind each. It may watch finished steps (StepObserver), act
// inside the step (StepHooks), check the transport before step 1 (preflight) and judge the
// whole run at the end (finish). Every detector is registered in checks/detectors/catalog.cpp.
#pragma once

#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "rocm_conformance_llm/checks/findings/finding_log.hpp"
#include "rocm_conformance_llm/config.hpp"
#include "rocm_conformance_llm/loop/step_hooks.hpp"
#include "rocm_conformance_llm/loop/step_record.hpp"

namespace rcl {

// What the run does that shapes its healthy noise: the statistical detectors calibrate their
// thresholds to it (catalog.cpp fills it from the trainer; defaults where a test has none).
struct RunProfile {
  int64_t steps = 1000;       // steps judged: a per-step threshold must keep the whole run's false-alarm odds small
  bool shared_cores = false;  // a CPU run: its steps and collectives run on cores the host shares with everything else
  int64_t vocab_size = 0;     // the model's vocabulary: a fresh model's loss starts near ln of it (0: unknown)
};

class Detector : public StepObserver, public StepHooks {
 public:
  Detector(const DiagnosticsConfig& cfg, FindingLog& log, RunProfile run = {}) : cfg_(cfg), run_(run), log_(log) {}
  void on_step(const StepRecord& /*record*/) override {}
  // Before step 1 (cross-rank checks prove the transport here).
  virtual void preflight() {}
  // Whole-run checks (steady-state variance, late slowdown); called once after the last step.
  virtual void finish() {}
  // Top-level report.json sections this detector measured (e.g. "collectives"), read after finish().
  virtual nlohmann::json report_sections() const { return nlohmann::json::object(); }

  // A detector of class T, knowing where in the step it acts (from T's own overrides, so what
  // --explain-step prints is what the code does). The catalog builds every detector this way.
  template <typename T, typename... Args>
  static std::unique_ptr<Detector> build(Args&&... args) {
    auto detector = std::make_unique<T>(std::forward<Args>(args)...);
    detector->hook_points_ = hook_points_of<T, Detector>();
    return detector;
  }
  // Empty for a detector built otherwise (a test's).
  HookPoints hook_points() const { return hook_points_; }
  // Its name in the catalog (make_detectors sets it): how --explain-step names it.
  const std::string& name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }

 protected:
  // Into the run's FindingLog, which caps each signature (its SignatureSpec): a NaN that
  // persists for 500 steps is one finding, not 500.
  void report(std::optional<Finding> f);  // nothing when empty
  bool reported(const std::string& signature) const { return reported_.count(signature) > 0; }
  bool in_warmup(const StepRecord& r) const { return r.step <= cfg_.warmup_steps; }
  FindingLog& log() { return log_; }  // for checks that record through a helper of their own

  // The z-score a per-step test needs so that `run_.steps` tests together stay within
  // cfg_.false_alarm_budget (Gaussian tail), never below `configured`.
  double run_threshold(double configured) const;

  const DiagnosticsConfig cfg_;
  const RunProfile run_;

 private:
  FindingLog& log_;
  std::set<std::string> reported_;
  HookPoints hook_points_;
  std::string name_ = "detector";
};

}  // namespace rcl
