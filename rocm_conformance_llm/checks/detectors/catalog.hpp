// The detector catalog: the built-in detectors of this folder as one table of data, and the
// registry around it that tests and extensions add to for a while. The runner builds every
// registered detector from it, the run's FindingLog caps each signature from it (find_signature,
// handed to the log), and the tests check it against the fault table (every signature is proven
// by a fault or a named test). What an entry holds: checks/findings/detector_spec.hpp.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "rocm_conformance_llm/checks/findings/coverage.hpp"
#include "rocm_conformance_llm/checks/findings/detector_spec.hpp"

namespace rcl {

const std::vector<DetectorSpec>& detector_registry();

// Adds `spec` until the returned guard is destroyed (tests, extensions).
[[nodiscard]] DetectorRegistration register_detector(DetectorSpec spec);

// The registered spec of signature `id`; nullptr when no detector declares it.
const SignatureSpec* find_signature(std::string_view id);
// The name of the detector that declares signature `id`; empty when none does.
std::string detector_of_signature(std::string_view id);
// The registered detector called `name` (the runner records its own checks' coverage with it);
// std::out_of_range when none is.
const DetectorSpec& registered_detector(std::string_view name);

// action_of and to_json with the default action registered for the finding's signature.
Action action_of(const Finding& f);
nlohmann::json to_json(const Finding& f);

// Every registered detector that applies to this run (none when diagnostics are disabled).
// `coverage`, when given, records each one with `make` as built or not, and why.
std::vector<std::unique_ptr<Detector>> make_detectors(const DetectorContext& ctx, RunCoverage* coverage = nullptr);

}  // namespace rcl
