#include "rocm_conformance_llm/checks/findings/finding_log.hpp"

#include <spdlog/spdlog.h>

namespace rcl {

namespace {
nlohmann::json optional_bool(const std::optional<bool>& b) { return b ? nlohmann::json(*b) : nlohmann::json(); }
}  // namespace

Action action_of(const Finding& f, const SignatureSpec* registered) {
  if (f.action) return *f.action;
  if (f.classification) {
    switch (*f.classification) {
      case Classification::transient: return Action::rerun;
      case Classification::persistent: return Action::isolate_node;
      // Both: the device computes what a higher precision or the CPU says the job computes.
      case Classification::precision:
      case Classification::configuration: return Action::check_config;
    }
  }
  if (f.severity == Severity::info) return Action::none;
  return registered ? registered->action : Action::report_upstream;
}

nlohmann::json to_json(const Finding& f, Action action) {
  return {{"component", f.component},
          {"signature", f.signature},
          {"severity", to_string(f.severity)},
          {"step", f.step},
          {"rank", f.rank},
          {"message", f.message},
          {"evidence", f.evidence},
          {"action", to_string(action)},
          {"classification", f.classification ? nlohmann::json(to_string(*f.classification)) : nlohmann::json()},
          {"reproducible", optional_bool(f.reproducible)},
          {"also_in_fp32", optional_bool(f.also_in_fp32)},
          {"also_on_cpu", optional_bool(f.also_on_cpu)}};
}

bool FindingLog::add(Finding f) {
  const SignatureSpec* spec = signatures_(f.signature);
  const int cap = spec ? spec->max_findings : 1;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (++seen_[f.signature] > cap) return false;
  }
  // Surface every finding on the console as it happens, not only in the final report.
  const auto level = f.severity == Severity::fail   ? spdlog::level::err
                     : f.severity == Severity::warn ? spdlog::level::warn
                                                    : spdlog::level::info;
  spdlog::log(level, "finding {} [{}] {} at step {} (rank {}): {}", to_string(f.severity), f.component, f.signature,
              f.step, f.rank, f.message);
  std::lock_guard<std::mutex> lock(mutex_);
  findings_.push_back(std::move(f));
  return true;
}

void FindingLog::amend(size_t index, const std::function<void(Finding&)>& change) {
  std::lock_guard<std::mutex> lock(mutex_);
  Finding& f = findings_.at(index);
  change(f);
  spdlog::info("finding {} at step {} (rank {}) now {} [{}]: {}", f.signature, f.step, f.rank, to_string(f.severity),
               to_string(action_of(f, signatures_(f.signature))), f.message);
}

std::vector<Finding> FindingLog::snapshot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return findings_;
}

size_t FindingLog::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return findings_.size();
}

}  // namespace rcl
