// The detector registry (checks/detectors/catalog.cpp): every signature declared once, attributed
// to a known component and proven by a fault of the --inject table or by a test that exists;
// thresholds are real config keys; every fault proves a signature; the FindingLog caps each
// signature as declared. And docs/extending.md's walk-through: a throwaway detector registered
// in-process is built by the run, fed, capped, proven by its fault and silent on a clean run.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <gtest/gtest.h>

#include "rocm_conformance_llm/checks/detectors/catalog.hpp"
#include "rocm_conformance_llm/faults/faults.hpp"
#include "rocm_conformance_llm/loop/trainer.hpp"
#include "rocm_conformance_llm/run/wiring.hpp"
#include "support/resolved_config.hpp"

namespace rcl {
namespace {
namespace RCL_UNITY_ID {

std::vector<std::string> all_fault_names() {
  std::vector<std::string> names;
  for (size_t k = 0; k < static_cast<size_t>(FaultKind::count); ++k) names.push_back(fault_name(FaultKind(k)));
  return names;
}

// A registry's proved_by: "gemm-corrupt|gemm-corrupt-once" -> its two faults.
std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, separator);) parts.push_back(part);
  return parts;
}

// Every TEST/TEST_P name in tests/, as "Suite.Name".
std::set<std::string> test_names_in_sources() {
  std::set<std::string> names;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(std::string(RCL_SOURCE_DIR) + "/tests")) {
    std::ifstream in(entry.path());
    std::string line;
    while (std::getline(in, line)) {
      for (const std::string macro : {"TEST(", "TEST_P("}) {
        if (line.rfind(macro, 0) != 0) continue;
        const auto open = macro.size(), comma = line.find(',', open), close = line.find(')', comma);
        const auto trim = [](std::string s) { return s.erase(0, s.find_first_not_of(' ')); };
        names.insert(line.substr(open, comma - open) + "." + trim(line.substr(comma + 1, close - comma - 1)));
      }
    }
  }
  return names;
}

TEST(DetectorRegistry, SignaturesAreDeclaredOnceWithAKnownComponent) {
  std::set<std::string> seen;
  std::set<std::string> components(std::begin(component::all), std::end(component::all));
  components.insert(component::host);
  components.insert(component::training);
  for (const auto& detector : detector_registry()) {
    for (const auto& s : detector.signatures) {
      EXPECT_TRUE(seen.insert(s.id).second) << s.id << " declared twice";
      // Only new_finding_vs_baseline takes the component of the finding it names.
      EXPECT_TRUE(components.count(s.component) || (s.component.empty() && s.id == "new_finding_vs_baseline"))
          << s.id << ": component '" << s.component << "'";
      EXPECT_GE(s.max_findings, 1) << s.id;
      EXPECT_EQ(find_signature(s.id), &s);
    }
  }
  EXPECT_EQ(find_signature("no_such_signature"), nullptr);
}

TEST(DetectorRegistry, EverySignatureIsProvenByAFaultOrATestThatExists) {
  const auto faults = all_fault_names();
  const auto tests = test_names_in_sources();
  ASSERT_GT(tests.size(), 100u);  // the scan found the suite
  for (const auto& detector : detector_registry())
    for (const auto& s : detector.signatures) {
      if (s.proved_by.rfind("test:", 0) == 0)
        EXPECT_TRUE(tests.count(s.proved_by.substr(5))) << s.id << ": no test " << s.proved_by;
      else
        for (const auto& fault : split(s.proved_by, '|'))
          EXPECT_NE(std::find(faults.begin(), faults.end(), fault), faults.end())
              << s.id << ": '" << fault << "' is not an --inject fault";
    }
}

TEST(DetectorRegistry, EveryFaultProvesASignature) {
  for (const auto& fault : all_fault_names()) {
    bool proves = false;
    for (const auto& detector : detector_registry())
      for (const auto& s : detector.signatures) {
        const auto proving = split(s.proved_by, '|');
        proves |= std::find(proving.begin(), proving.end(), fault) != proving.end();
      }
    EXPECT_TRUE(proves) << "fault " << fault << " proves no registered signature";
  }
}

TEST(DetectorRegistry, ThresholdsAreConfigKeys) {
  const nlohmann::json config = {{"training", TrainingConfig{}}, {"diagnostics", DiagnosticsConfig{}}};
  for (const auto& detector : detector_registry())
    for (const auto& key : detector.thresholds) {
      const auto dot = key.find('.');
      ASSERT_NE(dot, std::string::npos) << key;
      const auto section = key.substr(0, dot);
      EXPECT_TRUE(config.contains(section) && config.at(section).contains(key.substr(dot + 1)))
          << detector.name << ": " << key << " is not a config key";
    }
}

TEST(FindingLog, CapsEachSignatureAsTheRegistryDeclares) {
  FindingLog log(find_signature);
  for (int i = 0; i < 8; ++i) log.add(Finding{.signature = "loss_spike", .step = i});
  for (int i = 0; i < 3; ++i) log.add(Finding{.signature = "nonfinite_loss", .step = i});
  for (int i = 0; i < 3; ++i) log.add(Finding{.signature = "undeclared", .step = i});
  std::map<std::string, int> kept;
  for (const auto& f : log.snapshot()) ++kept[f.signature];
  EXPECT_EQ(kept["loss_spike"], find_signature("loss_spike")->max_findings);
  EXPECT_EQ(kept["loss_spike"], 5);
  EXPECT_EQ(kept["nonfinite_loss"], 1);
  EXPECT_EQ(kept["undeclared"], 1);
}

// --- the walk-through of docs/extending.md ---

// A throwaway detector: the loss more than doubling from one step to the next.
class LossJumpDetector final : public Detector {
 public:
  using Detector::Detector;
  void on_step(const StepRecord& r) override {
    if (previous_ && r.loss > 2.0 * *previous_)
      report(Finding{.component = component::rocblas,
                     .signature = "throwaway_loss_jump",
                     .severity = Severity::warn,
                     .step = r.step,
                     .rank = r.rank,
                     .message = "loss more than doubled"});
    previous_ = r.loss;
  }

 private:
  std::optional<double> previous_;
};

DetectorSpec loss_jump_spec() {
  return {"throwaway_loss_jump",
          "step",
          {{"throwaway_loss_jump", component::rocblas, Severity::warn, 2, "loss-spike"}},
          {},
          [](const DetectorContext& c) { return std::make_unique<LossJumpDetector>(c.diag, c.log); }};
}

// What the runner does, in-process: the fault injector and every registered detector, attached
// through the run's wiring (faults first).
std::vector<Finding> run_smoke(const std::string& inject) {
  RunContext ctx;
  ctx.cfg = testing::on_the_cpu(find_preset("smoke").training);
  ctx.cfg.steps = 24;
  ctx.cfg.eval_interval = 0;
  Trainer trainer(ctx);
  FindingLog log(find_signature);
  const FaultPlan faults = FaultPlan::parse(inject);
  FaultInjector injector(faults, 0, trainer.model(), ctx.device);
  auto detectors = make_detectors(DetectorContext{.diag = ctx.diag, .log = log, .loop = &trainer, .faults = &faults});
  RunWiring wiring;
  for (auto& d : detectors) wiring.add(part::detectors, d.get());
  wiring.add(part::fault_injector, &injector);
  wiring.attach_to(trainer);
  trainer.run();
  for (auto& d : detectors) d->finish();
  return log.snapshot();
}

int count(const std::vector<Finding>& findings, const std::string& signature) {
  return int(
      std::count_if(findings.begin(), findings.end(), [&](const Finding& f) { return f.signature == signature; }));
}

TEST(ExtendingWalkThrough, ThrowawayDetectorIsBuiltFedAndProvenByItsFault) {
  {
    const auto registration = register_detector(loss_jump_spec());
    ASSERT_NE(find_signature("throwaway_loss_jump"), nullptr);
    EXPECT_EQ(count(run_smoke(""), "throwaway_loss_jump"), 0);  // silent on a clean run
    const auto findings = run_smoke("loss-spike@step=15,loss-spike@step=18,loss-spike@step=21");
    EXPECT_EQ(count(findings, "throwaway_loss_jump"), 2);  // fires, capped at its declared 2
    EXPECT_EQ(count(findings, "loss_spike"), 3);           // the built-in detectors still run beside it
  }
  EXPECT_EQ(find_signature("throwaway_loss_jump"), nullptr);  // the guard took it out again
}

}  // namespace RCL_UNITY_ID
}  // namespace
}  // namespace rcl
