// Op fingerprint: how many times each ATen op was dispatched while a counter was alive,
// gathered with a global RecordFunction callback (device-agnostic; covers the autograd threads
// too). Two runs of the same configuration dispatch the same ops the same number of times, so a
// changed count is a changed kernel path (a fusion turned on or off, a fallback taken).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "rocm_conformance_llm/checks/findings/detector.hpp"

namespace rcl {

class LoopAccess;

using OpCounts = std::map<std::string, int64_t>;

// RAII: counting runs from construction to destruction (or stop()). One counter at a time per
// process; constructing a second while one is alive throws std::logic_error. Enable it for the
// steps that should be fingerprinted only: the callback costs a lock per op.
class OpCounter {
 public:
  OpCounter();
  ~OpCounter();
  OpCounter(const OpCounter&) = delete;
  OpCounter& operator=(const OpCounter&) = delete;

  void stop();              // stop counting; counts stay readable
  OpCounts counts() const;  // op name ("aten::mm", ...) -> calls so far

 private:
  uint64_t handle_ = 0;  // at::CallbackHandle, 0 once stopped
};

// Loop-side: every diagnostics.fingerprint_interval steps, counts the ops of the step's own
// work (not validation, not the checks) into StepRecord::op_counts, which metrics.jsonl keeps
// and `--baseline` compares (op_fingerprint_changed). Only every N steps: a lock per op.
class OpFingerprint final : public Detector {
 public:
  OpFingerprint(const DiagnosticsConfig& cfg, FindingLog& log, const LoopAccess& loop)
      : Detector(cfg, log), loop_(loop) {}
  void on_step_begin(int64_t step) override;
  void before_step_time(StepRecord& rec, double elapsed_s) override;

 private:
  const LoopAccess& loop_;
  std::optional<OpCounter> counter_;
};

}  // namespace rcl
