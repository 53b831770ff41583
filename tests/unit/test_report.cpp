// Verdict, exit codes, report.json, junit.xml and the crash / hang paths of ReportWriter.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "rocm_conformance_llm/checks/detectors/catalog.hpp"
#include "rocm_conformance_llm/checks/monitors/watchdog.hpp"
#include "rocm_conformance_llm/reports/report.hpp"
#include "rocm_conformance_llm/run/cli.hpp"

namespace rcl {
namespace {
namespace RCL_UNITY_ID {
namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("rcl_report_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

Finding finding(const char* comp, const char* sig, Severity sev, int64_t step) {
  return Finding{.component = comp,
                 .signature = sig,
                 .severity = sev,
                 .step = step,
                 .rank = 0,
                 .message = sig,
                 .evidence = {{"k", 1}}};
}

// A run in which every registered check ran, on a GPU or the CPU, `world_size` ranks over `backend`.
RunCoverage posed_coverage(bool gpu, int world_size = 1, std::string backend = {}) {
  RunCoverage c{
      .device = gpu ? "cuda" : "cpu", .gpu = gpu, .world_size = world_size, .collective_backend = std::move(backend)};
  for (const auto& spec : detector_registry()) c.record(spec, true);
  return c;
}

std::vector<ComponentStatus> statuses_of(const std::vector<Finding>& findings, const RunCoverage& run,
                                         int64_t steps = 10) {
  return component_statuses(findings, component_coverage(run, steps));
}

StepRecord step(int64_t s, double loss, double seconds, int64_t peak) {
  StepRecord r;
  r.step = s;
  r.loss = loss;
  r.step_time_s = seconds;
  r.tokens = 1000;
  r.memory = MemorySample{.allocated_bytes = peak / 2,
                          .reserved_bytes = peak,
                          .peak_allocated_bytes = peak,
                          .rss_bytes = 1 << 30,
                          .source = "hip"};
  return r;
}

TEST(Verdict, ExitCodesFollowSeverityAndOutcome) {
  EXPECT_EQ(verdict_for({}, RunOutcome::completed).status, "PASS");
  EXPECT_EQ(verdict_for({}, RunOutcome::completed).exit_code, kExitClean);
  const std::vector<Finding> warn = {finding(component::miopen, "late_slowdown", Severity::warn, 50),
                                     finding(component::miopen, "slow_first_step", Severity::info, 1)};
  EXPECT_EQ(verdict_for(warn, RunOutcome::completed).status, "WARN");
  EXPECT_EQ(verdict_for(warn, RunOutcome::completed).exit_code, 0);
  auto fail = warn;
  fail.push_back(finding(component::rocblas, "nonfinite_loss", Severity::fail, 20));
  EXPECT_EQ(verdict_for(fail, RunOutcome::completed).status, "FAIL");
  EXPECT_EQ(verdict_for(fail, RunOutcome::completed).exit_code, kExitFailFinding);
  EXPECT_EQ(verdict_for(fail, RunOutcome::crashed).status, "CRASHED");
  EXPECT_EQ(verdict_for({}, RunOutcome::crashed).exit_code, kExitCrashOrHang);
  EXPECT_EQ(verdict_for({}, RunOutcome::hung).status, "HUNG");
  EXPECT_EQ(verdict_for({}, RunOutcome::hung).exit_code, 3);
}

TEST(Verdict, EveryComponentIsListedWithCounts) {
  const std::vector<Finding> findings = {finding(component::rocblas, "nonfinite_loss", Severity::fail, 20),
                                         finding(component::rocblas, "loss_spike", Severity::warn, 19),
                                         finding(component::rccl, "collective_latency_spike", Severity::warn, 9),
                                         finding(component::miopen, "slow_first_step", Severity::info, 1)};
  const auto statuses = statuses_of(findings, posed_coverage(/*gpu=*/true, 2, "rccl"));
  ASSERT_EQ(statuses.size(), std::size(component::all));
  for (size_t i = 0; i < statuses.size(); ++i) EXPECT_EQ(statuses[i].component, component::all[i]);
  EXPECT_EQ(statuses[0].status, "FAIL");
  EXPECT_EQ(statuses[0].fail, 1);
  EXPECT_EQ(statuses[0].warn, 1);
  EXPECT_EQ(statuses[2].status, "WARN");  // RCCL
  EXPECT_EQ(statuses[4].status, "PASS");  // MIOpen: info only
  EXPECT_EQ(statuses[4].info, 1);
  const std::string table = format_component_table(statuses, verdict_for(findings, RunOutcome::completed));
  for (const char* c : component::all) EXPECT_NE(table.find(c), std::string::npos) << c;
  EXPECT_NE(table.find("verdict: FAIL (exit code 1)"), std::string::npos) << table;
}

TEST(JUnit, EscapesEverythingXmlCannotCarryRaw) {
  EXPECT_EQ(xml_escape("a<b>&\"c'\n\x01"), "a&lt;b&gt;&amp;&quot;c&apos;&#10;?");
  Finding nasty = finding(component::hip_runtime, "unclassified_crash", Severity::fail, 3);
  nasty.message = "what(): <vector>::at & \"out of range\" \x02";
  nasty.evidence = {{"exception", "</failure><injected/>"}};
  const std::string xml = junit_xml({nasty}, statuses_of({nasty}, posed_coverage(true)), {"watchdog"},
                                    verdict_for({nasty}, RunOutcome::crashed), {1.5, "2026-01-02T03:04:05", "h<o>st"});
  EXPECT_EQ(xml.find("<injected/>"), std::string::npos);
  EXPECT_EQ(xml.find("<vector>"), std::string::npos);
  EXPECT_NE(xml.find("&lt;vector&gt;::at &amp; &quot;out of range&quot;"), std::string::npos);
  EXPECT_NE(xml.find("hostname=\"h&lt;o&gt;st\""), std::string::npos) << xml;
  EXPECT_EQ(xml.find('\x02'), std::string::npos);
}

// Parses junit.xml with a real XML parser when one is available and returns
// "testsuite tests failures skipped", then "name:failures:system-outs:skipped" per testcase.
std::string parse_junit_with_python(const fs::path& xml) {
  if (!fs::exists("/usr/bin/python3")) return "no-python";
  const fs::path out = xml.parent_path() / "parsed.txt";
  const std::string cmd =
      "/usr/bin/python3 -c \"import sys,xml.etree.ElementTree as E; s=E.parse(sys.argv[1]).getroot(); "
      "print(s.tag, s.get('tests'), s.get('failures'), s.get('skipped')); "
      "[print(c.get('name') + ':' + str(len(c.findall('failure'))) + ':' + str(len(c.findall('system-out'))) + ':' + "
      "str(len(c.findall('skipped')))) "
      "for c in s.findall('testcase')]\" " +
      xml.string() + " > " + out.string() + " 2>&1";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << read(out);
  return read(out);
}

TEST(FindingFields, ActionComesFromClassificationElseSeverityElseRegistry) {
  auto f = finding(component::rocblas, "loss_spike", Severity::warn, 5);
  EXPECT_EQ(action_of(f), Action::rerun);  // the registry's default for loss_spike
  f.signature = "gemm_wrong_result";
  EXPECT_EQ(action_of(f), Action::isolate_node);
  f.classification = Classification::transient;
  EXPECT_EQ(action_of(f), Action::rerun);
  f.classification = Classification::precision;
  EXPECT_EQ(action_of(f), Action::check_config);
  f.action = Action::report_upstream;  // a finding's own action wins
  EXPECT_EQ(action_of(f), Action::report_upstream);
  auto info = finding(component::miopen, "slow_first_step", Severity::info, 1);
  EXPECT_EQ(action_of(info), Action::none);
  EXPECT_THROW(action_from_string("reboot"), ConfigError);
  EXPECT_THROW(classification_from_string("flaky"), ConfigError);
}

TEST(FindingFields, RoundTripAndOldReportsWithoutTheKeysLoad) {
  auto f = finding(component::rocblas, "nonfinite_loss", Severity::fail, 7);
  f.classification = Classification::persistent;
  f.reproducible = true;
  f.also_in_fp32 = true;
  const auto j = to_json(f);
  EXPECT_EQ(j["action"], "isolate_node");
  EXPECT_EQ(j["classification"], "persistent");
  EXPECT_EQ(j["reproducible"], true);
  EXPECT_TRUE(j["also_on_cpu"].is_null());  // not checked
  const auto back = finding_from_json(j);
  EXPECT_EQ(back.classification, Classification::persistent);
  EXPECT_EQ(back.action, Action::isolate_node);
  EXPECT_EQ(back.also_in_fp32, true);
  EXPECT_FALSE(back.also_on_cpu.has_value());

  nlohmann::json old = j;  // as written before the keys existed
  for (const char* key : {"action", "classification", "reproducible", "also_in_fp32", "also_on_cpu"}) old.erase(key);
  const auto loaded = finding_from_json(old);
  EXPECT_FALSE(loaded.classification.has_value());
  EXPECT_FALSE(loaded.reproducible.has_value());
  EXPECT_EQ(action_of(loaded), Action::rerun);  // nonfinite_loss's default
  old["action"] = "reboot";
  EXPECT_THROW(finding_from_json(old), ConfigError);
}

TEST(ReportWriter, WritesReportAndJUnitThatParseBack) {
  const fs::path dir = fresh_dir("complete");
  FindingLog log(find_signature);
  RunSummary summary;
  const double losses[] = {6.0, 5.0, 4.0, 3.5, 3.0, 3.2, 2.9, 2.8};
  for (int64_t s = 1; s <= 8; ++s) summary.on_step(step(s, losses[s - 1], s == 1 ? 1.0 : 0.1 + 0.01 * s, 100 * s));
  log.add(finding(component::rocblas, "nonfinite_grad_norm", Severity::fail, 6));
  log.add(finding(component::allocator, "memory_growth", Severity::warn, 7));
  Finding quoted = finding(component::rccl, "collective_latency_spike", Severity::warn, 5);
  quoted.message = "allreduce <25 MiB> & \"checksum\"";
  log.add(quoted);

  const nlohmann::json config = {{"training", {{"seed", 1234}, {"deterministic", true}}}};
  const nlohmann::json env = {{"libtorch", "1.13.1"}, {"device", "cpu"}};
  ReportWriter writer(dir, 0, config, env, log, summary, /*warmup_steps=*/2);
  writer.add_section("faults", {"nan@step=20"});
  RunCoverage coverage = posed_coverage(/*gpu=*/true);
  coverage.record(registered_detector("attention_probe"), false, "off for this run");
  writer.set_coverage(coverage);
  EXPECT_EQ(writer.write(RunOutcome::completed), kExitFailFinding);

  const auto report = nlohmann::json::parse(read(dir / "report.json"));
  EXPECT_EQ(report["verdict"], "FAIL");
  EXPECT_EQ(report["exit_code"], 1);
  EXPECT_EQ(report["outcome"], "completed");
  EXPECT_EQ(report["config"], config);
  EXPECT_EQ(report["environment"], env);
  EXPECT_EQ(report["faults"], nlohmann::json({"nan@step=20"}));
  ASSERT_EQ(report["findings"].size(), 3u);
  const auto back = finding_from_json(report["findings"][0]);
  EXPECT_EQ(back.component, component::rocblas);
  EXPECT_EQ(back.signature, "nonfinite_grad_norm");
  EXPECT_EQ(back.severity, Severity::fail);
  EXPECT_EQ(back.step, 6);
  EXPECT_EQ(back.evidence["k"], 1);
  ASSERT_EQ(report["components"].size(), 7u);
  EXPECT_EQ(report["components"][3]["component"], component::allocator);
  EXPECT_EQ(report["components"][3]["status"], "WARN");
  EXPECT_EQ(report["components"][4]["status"], "PASS");  // MIOpen: watched on the GPU, no finding
  EXPECT_EQ(report["components"][2]["status"], "WARN");  // RCCL: a finding on one rank is still one
  EXPECT_EQ(report["components"][2]["exercised"], false);
  EXPECT_EQ(report["components"][6]["status"], "NOT_RUN");
  EXPECT_EQ(report["components"][6]["reason"], "no check targeting it ran (attention_probe: off for this run)");
  EXPECT_EQ(report["coverage"]["steps"], 8);
  EXPECT_EQ(report["coverage"]["device"], "cuda");
  EXPECT_EQ(report["exercised_rocm_components"],
            nlohmann::json({component::rocblas, component::rocrand, component::allocator, component::miopen,
                            component::hip_runtime}));

  const auto& s = report["summary"];
  EXPECT_EQ(s["steps"], 8);
  EXPECT_EQ(s["loss"]["first"], 6.0);
  EXPECT_EQ(s["loss"]["last"], 2.8);
  EXPECT_EQ(s["loss"]["min"], 2.8);
  EXPECT_NEAR(s["step_time_s"]["median"].get<double>(), 0.155, 1e-9);  // steps 3..8: 0.13..0.18
  EXPECT_GT(s["step_time_s"]["p95"].get<double>(), 0.17);
  EXPECT_GT(s["step_time_s"]["cv"].get<double>(), 0.0);
  EXPECT_NEAR(s["tokens_per_s"]["overall"].get<double>(), 6000.0 / 0.93, 1e-6);
  EXPECT_EQ(s["peak_memory"]["bytes"], 800);
  EXPECT_EQ(s["peak_memory"]["figure"], "peak_allocated_bytes");

  const std::string xml = read(dir / "junit.xml");
  EXPECT_NE(xml.find("allreduce &lt;25 MiB&gt; &amp; &quot;checksum&quot;"), std::string::npos);
  for (const char* c : component::all) EXPECT_NE(xml.find("name=\"" + xml_escape(c) + "\""), std::string::npos) << c;
  EXPECT_NE(xml.find("<testcase classname=\"rocm-conformance-llm.check\" name=\"numerics\""), std::string::npos) << xml;
  EXPECT_EQ(xml.find("name=\"attention_probe\""), std::string::npos) << xml;  // did not run: no test case
  EXPECT_NE(xml.find("timestamp=\""), std::string::npos) << xml;
  EXPECT_NE(xml.find("hostname=\""), std::string::npos) << xml;
  const std::string parsed = parse_junit_with_python(dir / "junit.xml");
  if (parsed != "no-python") {
    // 7 components and every registered check but attention_probe; attention skipped (RCCL warned);
    // rocBLAS and the numerics check that names it fail.
    const size_t checks = coverage.checks.size() - 1;
    EXPECT_NE(parsed.find(fmt::format("testsuite {} 2 1", 7 + checks)), std::string::npos) << parsed;
    EXPECT_NE(parsed.find("numerics:1:0"), std::string::npos) << parsed;
    EXPECT_NE(parsed.find("AOTriton/CK attention:0:0:1"), std::string::npos) << parsed;
    EXPECT_NE(parsed.find("rocBLAS/hipBLASLt:1:0"), std::string::npos) << parsed;
    EXPECT_NE(parsed.find("ROCr allocator:0:1"), std::string::npos) << parsed;
    EXPECT_NE(parsed.find("RCCL:0:1"), std::string::npos) << parsed;
    EXPECT_NE(parsed.find("MIOpen:0:0"), std::string::npos) << parsed;
  }
  EXPECT_FALSE(fs::exists(dir / "report.json.tmp"));
}

TEST(ReportWriter, CrashReportClassifiesTheExceptionAndExitsThree) {
  const fs::path dir = fresh_dir("crash");
  FindingLog log(find_signature);
  RunSummary summary;
  for (int64_t s = 1; s <= 4; ++s) summary.on_step(step(s, 5.0, 0.1, 1 << 20));
  ReportWriter writer(dir, 1, {}, {}, log, summary, 0);
  const int code = writer.write_crash(
      "HIP out of memory. Tried to allocate 2.00 MiB. GPU 0 has a total capacity of 63.98 GiB of which 0 bytes is "
      "free. Of the allocated memory 47.12 GiB is allocated by PyTorch, and 15.00 GiB is reserved by PyTorch but "
      "unallocated.\nframe #0: c10::Error::Error",
      phase::backward);
  EXPECT_EQ(code, kExitCrashOrHang);
  EXPECT_EQ(writer.report_path().filename(), "report.rank1.json");
  const auto report = nlohmann::json::parse(read(dir / "report.rank1.json"));
  EXPECT_EQ(report["verdict"], "CRASHED");
  EXPECT_EQ(report["exit_code"], 3);
  ASSERT_EQ(report["findings"].size(), 1u);
  const auto& f = report["findings"][0];
  EXPECT_EQ(f["component"], component::allocator);
  EXPECT_EQ(f["signature"], "out_of_memory");
  EXPECT_EQ(f["step"], 5);  // the step that was running
  EXPECT_EQ(f["evidence"]["last_memory"]["reserved_bytes"], 1 << 20);
  EXPECT_EQ(f["evidence"]["allocator_message"]["fragmentation_suspected"], true);
  EXPECT_TRUE(fs::exists(dir / "junit.rank1.xml"));
}

// A CPU run's crash report: libtorch's CPU allocator is malloc, so its out-of-memory is the
// host's, never the ROCr allocator's.
TEST(ReportWriter, CpuRunOutOfMemoryIsReportedAgainstTheHost) {
  const fs::path dir = fresh_dir("crash-cpu");
  FindingLog log(find_signature);
  RunSummary summary;
  ReportWriter writer(dir, 0, {}, {{"device_kind", "cpu"}}, log, summary, 0);
  EXPECT_EQ(writer.write_crash("[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: not enough memory: "
                               "you tried to allocate 100000000000000 bytes.",
                               "setup_model"),
            kExitCrashOrHang);
  const auto report = nlohmann::json::parse(read(dir / "report.json"));
  ASSERT_EQ(report["findings"].size(), 1u);
  const auto& f = report["findings"][0];
  EXPECT_EQ(f["component"], component::host);
  EXPECT_EQ(f["signature"], "host_out_of_memory");
  EXPECT_EQ(f["classification"], "configuration");
  EXPECT_EQ(f["action"], "check_config");
  for (const auto& c : report["components"]) EXPECT_NE(c["status"], "FAIL") << c;
}

TEST(ReportWriter, WatchdogCallbackWritesAHungReportAndTheFirstVerdictStands) {
  const fs::path dir = fresh_dir("hang");
  FindingLog log(find_signature);
  RunSummary summary;
  summary.on_step(step(1, 5.0, 0.1, 1 << 20));
  ReportWriter writer(dir, 0, {}, {}, log, summary, 0);
  std::promise<int> exit_code;
  Watchdog dog(0.3, 0, log, [&](const Finding&) { exit_code.set_value(writer.write(RunOutcome::hung)); });
  dog.heartbeat(1);
  dog.set_phase(phase::grad_sync, 2, "allreduce seq 4");
  auto future = exit_code.get_future();
  ASSERT_EQ(future.wait_for(std::chrono::seconds(3)), std::future_status::ready);
  EXPECT_EQ(future.get(), kExitCrashOrHang);

  // The training thread limping to its end later must not overwrite the hang verdict.
  EXPECT_EQ(writer.write(RunOutcome::completed), kExitCrashOrHang);
  const auto report = nlohmann::json::parse(read(dir / "report.json"));
  EXPECT_EQ(report["verdict"], "HUNG");
  ASSERT_EQ(report["findings"].size(), 1u);
  EXPECT_EQ(report["findings"][0]["signature"], "collective_hang");
  EXPECT_EQ(report["findings"][0]["component"], component::rccl);
  EXPECT_EQ(report["findings"][0]["step"], 2);
}

// No finding and no step: the verdict and exit code stay PASS / 0 (users' scripts), and every
// component and the verdict's sentence say nothing was exercised.
TEST(ReportWriter, CleanRunWithoutStepsPassesButExercisedNothing) {
  const fs::path dir = fresh_dir("clean");
  FindingLog log(find_signature);
  RunSummary summary;
  ReportWriter writer(dir, 0, {}, {}, log, summary, 5);
  writer.set_coverage(posed_coverage(/*gpu=*/true));
  EXPECT_EQ(writer.write(RunOutcome::completed), kExitClean);
  const auto report = nlohmann::json::parse(read(dir / "report.json"));
  EXPECT_EQ(report["verdict"], "PASS");
  EXPECT_EQ(report["summary"]["steps"], 0);
  EXPECT_EQ(report["exercised_rocm_components"], nlohmann::json::array());
  EXPECT_NE(report["coverage_note"].get<std::string>().find("No ROCm component was exercised"), std::string::npos);
  for (const auto& c : report["components"]) {
    EXPECT_EQ(c["status"], "NOT_RUN") << c;
    EXPECT_EQ(c["reason"], "no training step finished") << c;
  }
  const std::string xml = read(dir / "junit.xml");
  EXPECT_EQ(xml.find("<failure"), std::string::npos);
  EXPECT_NE(xml.find("skipped=\"7\""), std::string::npos) << xml;
}

// --- coverage: PASS only for what a check exercised ---

TEST(Coverage, CpuRunExercisesNoComponentAndSaysWhyForEach) {
  const auto statuses = statuses_of({}, posed_coverage(/*gpu=*/false));
  for (const auto& s : statuses) {
    EXPECT_EQ(s.status, "NOT_RUN") << s.component;
    EXPECT_FALSE(s.reason.empty()) << s.component;
    EXPECT_FALSE(s.checks.empty()) << s.component;  // the checks ran; the device was not ROCm's
  }
  EXPECT_EQ(statuses[0].reason, "CPU device: no ROCm library ran");
  EXPECT_EQ(statuses[2].reason, "one rank: no collective crossed ranks");
  EXPECT_TRUE(exercised_components(statuses).empty());
  const std::string table = format_component_table(statuses, verdict_for({}, RunOutcome::completed));
  EXPECT_NE(table.find("verdict: PASS (exit code 0). No ROCm component was exercised"), std::string::npos) << table;
  EXPECT_NE(table.find("NOT_RUN"), std::string::npos) << table;
}

TEST(Coverage, GpuRunWithItsChecksPassesEveryComponentButOneRankRccl) {
  const auto one_rank = statuses_of({}, posed_coverage(/*gpu=*/true));
  for (const auto& s : one_rank)
    EXPECT_EQ(s.status, s.component == component::rccl ? "NOT_RUN" : "PASS") << s.component;
  const auto two_ranks = statuses_of({}, posed_coverage(/*gpu=*/true, 2, "rccl"));
  for (const auto& s : two_ranks) EXPECT_EQ(s.status, "PASS") << s.component << ": " << s.reason;
  EXPECT_EQ(coverage_sentence(two_ranks), "Every ROCm component was exercised.");
  // c10d's NCCL group on a CUDA build carries the same collectives on that vendor's GPUs.
  const auto nccl = statuses_of({}, posed_coverage(/*gpu=*/true, 2, "nccl"));
  EXPECT_EQ(nccl[2].status, "PASS") << nccl[2].reason;
}

TEST(Coverage, CollectivesOverGlooAreNotRccl) {
  for (const bool gpu : {false, true}) {
    const auto statuses = statuses_of({}, posed_coverage(gpu, 2, "gloo"));
    EXPECT_EQ(statuses[2].status, "NOT_RUN");
    EXPECT_EQ(statuses[2].reason, "collectives ran over Gloo across 2 ranks, not RCCL");
  }
}

TEST(Coverage, AFindingOnTheCpuIsStillAFinding) {
  const std::vector<Finding> findings = {finding(component::rocblas, "nonfinite_loss", Severity::fail, 3),
                                         finding(component::rccl, "straggler_rank", Severity::warn, 4),
                                         finding(component::miopen, "slow_first_step", Severity::info, 1)};
  const auto statuses = statuses_of(findings, posed_coverage(/*gpu=*/false));
  EXPECT_EQ(statuses[0].status, "FAIL");
  EXPECT_EQ(statuses[2].status, "WARN");
  EXPECT_EQ(statuses[4].status, "NOT_RUN");  // info only, on the CPU
}

TEST(Coverage, ACheckThatDidNotRunOrASkippedModeIsTheReason) {
  RunCoverage run = posed_coverage(/*gpu=*/true);
  run.record(registered_detector("attention_probe"), false, "off for this run");
  run.skipped_modes.push_back({"attention", {component::attention}, "needs libtorch >= 2.0"});
  run.skipped_modes.push_back({"gemm", {component::rocblas}, "needs something"});
  const auto coverage = component_coverage(run, 10);
  EXPECT_FALSE(coverage[6].exercised);
  EXPECT_EQ(coverage[6].reason,
            "no check targeting it ran (attention_probe: off for this run); "
            "stress mode 'attention' skipped: needs libtorch >= 2.0");
  EXPECT_TRUE(coverage[0].exercised) << coverage[0].reason;  // the base workload's checks reached it anyway
  run.diagnostics_enabled = false;
  for (const auto& c : component_coverage(run, 10))
    EXPECT_EQ(c.reason.rfind("diagnostics disabled", 0), 0u) << c.reason;
}

}  // namespace RCL_UNITY_ID
}  // namespace
}  // namespace rcl
