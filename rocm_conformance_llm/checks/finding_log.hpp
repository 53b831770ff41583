// Findings as the run keeps and reports them: each signature's registered default action and
// cap (checks/registry.cpp) applied to the vocabulary of base/finding.hpp.
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "rocm_conformance_llm/base/finding.hpp"

namespace rcl {

// The finding's action: its own, else its classification's, else `none` for an info finding,
// else its signature's registered default (checks/registry.cpp).
Action action_of(const Finding& f);
nlohmann::json to_json(const Finding& f);
// Thread-safe collection of findings (the watchdog thread reports too). The one rate limit:
// each signature is kept at most as often as its registry entry says (checks/registry.cpp;
// once for a signature no detector declares); later ones are counted, not stored.
class FindingLog {
 public:
  // Returns whether `f` was kept.
  bool add(Finding f);
  // Changes the finding kept at `index` of snapshot() (a re-run classifies it after the fact).
  void amend(size_t index, const std::function<void(Finding&)>& change);
  std::vector<Finding> snapshot() const;
  size_t size() const;

 private:
  mutable std::mutex mutex_;
  std::vector<Finding> findings_;
  std::map<std::string, int> seen_;  // per signature, kept or not
};

}  // namespace rcl
