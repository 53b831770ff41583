// Findings as the run keeps and reports them: each signature's registered default action and
// cap applied to the vocabulary of base/finding.hpp. The signatures are the detector catalog's
// (checks/detectors/catalog.cpp), handed in by whoever builds the run.
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "rocm_conformance_llm/base/finding.hpp"

namespace rcl {

struct SignatureSpec {
  std::string id;                      // stable: report.json, junit.xml
  std::string component;               // one of component::all; empty: that of the finding it names
  Severity severity = Severity::fail;  // the usual one (a few signatures choose per finding)
  int max_findings = 1;                // per rank and run: a persisting fault is reported a few times, not every step
  std::string proved_by;  // the --inject fault(s) that make it fire ('|' between two), or "test:Suite.Name"
  // What a person does next when it was not re-run and classified (finding.hpp action_of).
  Action action = Action::report_upstream;
};

// The registered spec of signature `id`; nullptr when no detector declares it.
using SignatureLookup = std::function<const SignatureSpec*(std::string_view id)>;

// The finding's action: its own, else its classification's, else `none` for an info finding,
// else `registered`'s default (report_upstream for a signature no detector declares).
Action action_of(const Finding& f, const SignatureSpec* registered);
// report.json's finding, with `action` as action_of gives it.
nlohmann::json to_json(const Finding& f, Action action);

// Thread-safe collection of findings (the watchdog thread reports too). The one rate limit:
// each signature is kept at most as often as its registered spec says (once for a signature
// no detector declares); later ones are counted, not stored.
class FindingLog {
 public:
  explicit FindingLog(SignatureLookup signatures) : signatures_(std::move(signatures)) {}
  // Returns whether `f` was kept.
  bool add(Finding f);
  // Changes the finding kept at `index` of snapshot() (a re-run classifies it after the fact).
  void amend(size_t index, const std::function<void(Finding&)>& change);
  std::vector<Finding> snapshot() const;
  size_t size() const;

 private:
  const SignatureLookup signatures_;
  mutable std::mutex mutex_;
  std::vector<Finding> findings_;
  std::map<std::string, int> seen_;  // per signature, kept or not
};

}  // namespace rcl
