// The job report's logic over synthetic rank rows of several hosts: the roll-up per host, the
// suspect node (the host of the rank that failed, never one whose ranks only observed it), the odd
// node out (a host all of whose ranks are slower), and the job's verdict.
#include <gtest/gtest.h>

#include "rocm_conformance_llm/base/errors.hpp"
#include "rocm_conformance_llm/reports/job_report.hpp"
#include "rocm_conformance_llm/reports/ocp_output.hpp"

namespace rcl {
namespace {
namespace RCL_UNITY_ID {

// Ranks 0..n-1, `per_host` to a host ("node0", "node1", ...), each clean with `busy_s` a step.
std::vector<RankRow> clean_rows(int n, int per_host, double busy_s = 0.1) {
  std::vector<RankRow> rows;
  for (int r = 0; r < n; ++r) {
    RankRow row;
    row.id = {
        .world_rank = r, .local_rank = r % per_host, .host = "node" + std::to_string(r / per_host), .device = "cpu"};
    row.verdict = "PASS";
    row.exit_code = 0;
    row.steps = 20;
    row.median_busy_s = busy_s;
    row.median_step_s = busy_s + 0.05;
    rows.push_back(row);
  }
  return rows;
}

RowFinding timeout_naming(int observer, std::vector<int> absent) {
  return {.rank = observer,
          .signature = "collective_timeout",
          .severity = Severity::fail,
          .message = "timed out",
          .blames = std::move(absent)};
}

void crash(RankRow& row, RowFinding f) {
  row.verdict = "CRASHED";
  row.exit_code = kExitCrashOrHang;
  row.fail = 1;
  row.findings.push_back(std::move(f));
}

void lose(RankRow& row) {
  row.source = "heartbeat";
  row.verdict = "LOST";
  row.exit_code = -1;
  row.last_step = 9;
  row.last_phase = "entering collective #120 'tp:all_reduce.block0.mlp.bwd'";
}

TEST(JobReportSuspects, TheLostRanksHostNotTheHostsOfItsObservers) {
  // node0: ranks 0,1; node1: ranks 2,3. Rank 3 stops: its subgroup peers 1 and 2 time out naming
  // it; rank 0 times out waiting on rank 1, which was itself waiting on rank 3.
  auto rows = clean_rows(4, 2);
  lose(rows[3]);
  crash(rows[0], timeout_naming(0, {1}));
  crash(rows[1], timeout_naming(1, {3}));
  crash(rows[2], timeout_naming(2, {3}));
  const auto suspects = suspect_hosts(rows);
  ASSERT_EQ(suspects.size(), 1u);
  EXPECT_EQ(suspects[0].host, "node1");
  EXPECT_EQ(suspects[0].ranks, std::vector<int>({3}));
  ASSERT_FALSE(suspects[0].evidence.empty());
  EXPECT_NE(suspects[0].evidence[0].find("rank 3 (host node1, local rank 1, cpu) sent no verdict"), std::string::npos)
      << suspects[0].evidence[0];
  const JobSummary job = job_summary(rows, {});
  EXPECT_EQ(job.verdict, "CRASHED");
  EXPECT_EQ(job.exit_code, kExitCrashOrHang);
}

TEST(JobReportSuspects, ALostRankExplainsTheTransportErrorsOfThePeersOthersThenFindAbsent) {
  // 3 nodes x 2; rank 1 killed inside a collective: its ring neighbours fail at once with a read
  // error naming nobody and leave, rank 5 is stopped by its launcher (its node-mate rank 4 failed
  // first); rank 4, still waiting, names them absent from the next one.
  auto rows = clean_rows(6, 2);
  lose(rows[1]);
  for (const int r : {0, 2, 3})
    crash(rows[r], {.rank = r, .signature = "collective_error", .severity = Severity::fail, .message = "reset"});
  rows[5].verdict = "INTERRUPTED";
  crash(rows[4], timeout_naming(4, {2, 3, 5}));
  const auto suspects = suspect_hosts(rows);
  ASSERT_EQ(suspects.size(), 1u);
  EXPECT_EQ(suspects[0].host, "node0");
  EXPECT_EQ(suspects[0].ranks, std::vector<int>({1}));
  // With no rank lost, the same transport errors leave the ranks named absent decisive.
  rows[1] = clean_rows(6, 2)[1];
  const auto without_a_loss = suspect_hosts(rows);
  ASSERT_EQ(without_a_loss.size(), 2u);
  EXPECT_EQ(without_a_loss[0].ranks, std::vector<int>({2, 3}));
  EXPECT_EQ(without_a_loss[1].ranks, std::vector<int>({5}));
}

TEST(JobReportSuspects, ARankNamedAbsentThatWaitedOnNobodyIsDecisiveEvenWithItsOwnReport) {
  // Rank 2 froze and came back too late (its report says it crashed, naming nobody).
  auto rows = clean_rows(4, 2);
  crash(rows[0], timeout_naming(0, {2}));
  rows[2].verdict = "HUNG";
  const auto suspects = suspect_hosts(rows);
  ASSERT_EQ(suspects.size(), 1u);
  EXPECT_EQ(suspects[0].host, "node1");
  EXPECT_EQ(suspects[0].ranks, std::vector<int>({2}));
}

TEST(JobReportSuspects, AnOwnFailFindingNamesItsHostAndWarningsNameNone) {
  auto rows = clean_rows(6, 2);
  rows[4].findings.push_back({.rank = 4,
                              .signature = "parameter_divergence",
                              .severity = Severity::fail,
                              .message = "rank 4's parameters differ"});
  rows[1].findings.push_back({.rank = 1, .signature = "straggler_rank", .severity = Severity::warn, .message = "slow"});
  const auto suspects = suspect_hosts(rows);
  ASSERT_EQ(suspects.size(), 1u);
  EXPECT_EQ(suspects[0].host, "node2");
  EXPECT_EQ(suspects[0].ranks, std::vector<int>({4}));
}

TEST(JobReportSuspects, CleanJobHasNoSuspectAndPasses) {
  const auto rows = clean_rows(4, 2);
  EXPECT_TRUE(suspect_hosts(rows).empty());
  const JobSummary job = job_summary(rows, {});
  EXPECT_EQ(job.verdict, "PASS");
  EXPECT_EQ(job.exit_code, kExitClean);
}

// A survivor's view without the store: the other ranks' state unknown (never lost, never a
// suspect by itself), rank 0 lost only where the store's host refused the connection.
std::vector<RankRow> survivor_view(int n, int per_host, int writer) {
  auto rows = clean_rows(n, per_host);
  for (auto& row : rows) {
    if (row.id.world_rank == writer) continue;
    row = RankRow{.id = row.id, .source = "unknown", .verdict = "UNKNOWN"};
  }
  return rows;
}

TEST(JobReportView, UnknownRowsAreNeitherLostNorSuspectsUnlessNamedAbsent) {
  auto rows = survivor_view(4, 2, 2);
  crash(rows[2], timeout_naming(2, {}));  // every rank entered it: nobody named
  EXPECT_TRUE(suspect_hosts(rows).empty());
  EXPECT_EQ(roll_up_hosts(rows)[0].lost, 0);
  EXPECT_EQ(job_summary(rows, {}).verdict, "CRASHED");  // the writer's own
  // The store's host refused: rank 0 lost with that evidence; rank 1, which the writer names absent, too.
  rows[0].source = "none";
  rows[0].verdict = "LOST";
  rows[0].last_phase = "host node0 refuses connections to the store";
  rows[2].findings = {timeout_naming(2, {1})};
  const auto suspects = suspect_hosts(rows);
  ASSERT_EQ(suspects.size(), 1u);
  EXPECT_EQ(suspects[0].host, "node0");
  EXPECT_EQ(suspects[0].ranks, std::vector<int>({0, 1}));
  EXPECT_NE(suspects[0].evidence[0].find("sent no verdict and no heartbeat reached this view: host node0 refuses"),
            std::string::npos)
      << suspects[0].evidence[0];
}

TEST(JobReportView, AnUnresolvedViewNamesNoNodeAndACutWriterNamesItself) {
  auto rows = survivor_view(4, 2, 2);
  crash(rows[2], timeout_naming(2, {0, 1}));
  JobView unresolved{.written_by = 2, .unresolved = "the store did not answer"};
  EXPECT_TRUE(suspects_in_view(rows, unresolved).empty());
  const auto doc = job_report_json(rows, {}, unresolved);
  EXPECT_EQ(doc.at("unresolved"), "the store did not answer");
  EXPECT_EQ(doc.at("written_by"), 2);
  EXPECT_TRUE(doc.at("suspect_hosts").empty());
  EXPECT_EQ(doc.at("verdict"), "CRASHED");
  // Without the view's doubt the peer it names absent would be the suspect.
  EXPECT_EQ(suspects_in_view(rows, JobView{.written_by = 2}).at(0).host, "node0");
  // The writer's own links are cut: the ranks it did not hear from are behind its cut, not lost.
  const JobView cut{.written_by = 2, .cut_links = {"eth0"}};
  const auto own = suspects_in_view(rows, cut);
  ASSERT_EQ(own.size(), 1u);
  EXPECT_EQ(own[0].host, "node1");
  EXPECT_EQ(own[0].ranks, std::vector<int>({2}));
  EXPECT_NE(own[0].evidence[0].find("every network interface of host node1 has lost its link (eth0)"),
            std::string::npos);
  // Rank 0's gather, its link cut: the lost ranks of node1 are not named, node0 is.
  auto gathered = clean_rows(4, 2);
  lose(gathered[2]);
  lose(gathered[3]);
  const auto at_rank0 = suspects_in_view(gathered, JobView{.written_by = 0, .cut_links = {"eth0"}});
  ASSERT_EQ(at_rank0.size(), 1u);
  EXPECT_EQ(at_rank0[0].host, "node0");
  // A cut that hid nobody of another host (one host's lost rank) changes nothing.
  auto one_host = clean_rows(2, 2);
  lose(one_host[1]);
  EXPECT_EQ(suspects_in_view(one_host, JobView{.written_by = 0, .cut_links = {"eth0"}}).at(0).ranks,
            std::vector<int>({1}));
}

TEST(JobReportView, AWriterThatWasItselfFrozenNamesItsOwnHostAloneNeverTheRanksItCouldNotHear) {
  // Rank 0 stopped (SIGSTOP) for longer than the collective timeout, then resumed: its peers timed
  // out naming it and left; its own failure names them. Its rows: theirs (they reported), or,
  // where they never reached it, lost ones.
  auto rows = clean_rows(4, 1);
  for (const int r : {1, 2, 3}) crash(rows[r], timeout_naming(r, {0}));
  crash(rows[0], timeout_naming(0, {1, 2, 3}));
  const JobView paused{.written_by = 0, .paused_s = 27.4};
  const auto own = suspects_in_view(rows, paused);
  ASSERT_EQ(own.size(), 1u);
  EXPECT_EQ(own[0].host, "node0");
  EXPECT_EQ(own[0].ranks, std::vector<int>({0}));
  EXPECT_NE(own[0].evidence[0].find("own process did not run for 27 s"), std::string::npos) << own[0].evidence[0];
  EXPECT_EQ(job_report_json(rows, {}, paused).at("paused_s"), 27.4);
  auto unheard = clean_rows(4, 1);
  for (const int r : {1, 2, 3}) {
    lose(unheard[r]);
    unheard[r].source = "none";
  }
  EXPECT_EQ(suspects_in_view(unheard, paused).at(0).ranks, std::vector<int>({0}));
  EXPECT_EQ(suspect_hosts(unheard).size(), 3u);  // the same rows without the pause: the unheard hosts
  EXPECT_TRUE(job_report_json(rows, {}, JobView{}).at("paused_s").is_null());
}

TEST(JobReportRollup, OneEntryPerHostWithItsWorstVerdictAndLostRanks) {
  auto rows = clean_rows(4, 2);
  lose(rows[3]);
  rows[2].verdict = "WARN";
  rows[2].warn = 2;
  const auto hosts = roll_up_hosts(rows);
  ASSERT_EQ(hosts.size(), 2u);
  EXPECT_EQ(hosts[0].host, "node0");
  EXPECT_EQ(hosts[0].verdict, "PASS");
  EXPECT_EQ(hosts[1].ranks, std::vector<int>({2, 3}));
  EXPECT_EQ(hosts[1].verdict, "LOST");
  EXPECT_EQ(hosts[1].warn, 2);
  EXPECT_EQ(hosts[1].lost, 1);
  ASSERT_TRUE(hosts[0].median_busy_s.has_value());
  EXPECT_DOUBLE_EQ(*hosts[0].median_busy_s, 0.1);
}

TEST(JobReportOddNode, TheHostWhoseRanksAreAllSlowerIsNamedAsAWarning) {
  auto rows = clean_rows(6, 2);  // node0..node2
  rows[2].median_busy_s = 0.31;
  rows[3].median_busy_s = 0.29;
  rows[0].median_busy_s = 0.12;  // noise within the margin stays silent
  const auto odd = odd_nodes(rows);
  ASSERT_EQ(odd.size(), 1u);
  EXPECT_EQ(odd[0].host, "node1");
  EXPECT_EQ(odd[0].ranks, std::vector<int>({2, 3}));
  EXPECT_NEAR(odd[0].host_busy_s, 0.30, 1e-9);
  EXPECT_NEAR(odd[0].others_busy_s, 0.10, 1e-9);
  const Finding f = odd_node_finding(odd[0], 20);
  EXPECT_EQ(f.signature, "odd_node_slow");
  EXPECT_EQ(f.severity, Severity::warn);
  EXPECT_EQ(f.component, component::host);
  EXPECT_EQ(f.evidence.at("host"), "node1");
  const JobSummary job = job_summary(rows, {f});
  EXPECT_EQ(job.verdict, "WARN");
  EXPECT_EQ(job.exit_code, kExitClean);
}

TEST(JobReportOddNode, NoOddNodeWhenOneRankOfTheHostIsFastOneHostOrTooFewSteps) {
  auto rows = clean_rows(6, 2);
  rows[2].median_busy_s = 0.3;  // rank 3 stays fast: not the whole node
  EXPECT_TRUE(odd_nodes(rows).empty());
  auto one_host = clean_rows(4, 4);
  one_host[0].median_busy_s = one_host[1].median_busy_s = 0.5;
  EXPECT_TRUE(odd_nodes(one_host).empty());
  auto short_run = clean_rows(4, 2);
  short_run[2].median_busy_s = short_run[3].median_busy_s = 0.5;
  EXPECT_EQ(odd_nodes(short_run).size(), 1u);  // two hosts: the slower one is the odd one
  for (auto& r : short_run) r.steps = kOddNodeMinSteps - 1;
  EXPECT_TRUE(odd_nodes(short_run).empty());
}

TEST(JobReportOddNode, MoreThanHalfTheHostsSlowerIsNoOddNode) {
  auto rows = clean_rows(10, 2);  // 5 hosts: 3 slower than the other 2 is the job, not a node
  for (int r = 4; r < 10; ++r) rows[r].median_busy_s = 0.4;
  EXPECT_TRUE(odd_nodes(rows).empty());
  rows.resize(8);  // 4 hosts, 2 slower: both named
  const auto odd = odd_nodes(rows);
  ASSERT_EQ(odd.size(), 2u);
  EXPECT_EQ(odd[0].host, "node2");
  EXPECT_EQ(odd[1].host, "node3");
}

TEST(JobReportRows, BusyTimeIsTheStepOutsideItsCollectivesAndRowsRoundTrip) {
  std::vector<StepPoint> steps;
  for (int s = 1; s <= 7; ++s)
    steps.push_back({.step = s, .step_time_s = 0.5, .collective_s = 0.2, .tokens = 100, .peak_memory_bytes = 1000 * s});
  Finding peer{component::rccl, "collective_timeout", Severity::fail, 7, 1, "rank 1: rank 3 never entered it", {}};
  peer.evidence["missing_world_ranks"] = {3};
  const RankRow row =
      rank_row({.world_rank = 1, .local_rank = 1, .host = "nodeA", .device = "cpu"}, steps, 2, {peer}, "backward");
  EXPECT_EQ(row.steps, 5);  // after the warm-up
  EXPECT_NEAR(*row.median_busy_s, 0.3, 1e-12);
  EXPECT_NEAR(*row.tokens_per_s, 200.0, 1e-9);
  EXPECT_EQ(*row.peak_memory_bytes, 7000);
  EXPECT_EQ(row.last_step, 7);
  ASSERT_EQ(row.findings.size(), 1u);
  EXPECT_EQ(row.findings[0].blames, std::vector<int>({3}));
  const RankRow back = rank_row_from_json(to_json(row));
  EXPECT_EQ(to_json(back), to_json(row));
}

TEST(JobReportFiles, JunitFailsTheLostRankAndTheSuspectHostOnly) {
  auto rows = clean_rows(4, 2);
  lose(rows[3]);
  crash(rows[2], timeout_naming(2, {3}));
  const auto doc = job_report_json(rows, {});
  EXPECT_EQ(doc.at("suspect_hosts").size(), 1u);
  const std::string xml = job_junit_xml(doc);
  EXPECT_NE(xml.find("tests=\"6\" failures=\"3\""), std::string::npos) << xml;  // ranks 2, 3; host node1
  EXPECT_NE(xml.find("name=\"rank 3 (node1, local rank 1, cpu)\">\n      <failure"), std::string::npos) << xml;
  EXPECT_NE(xml.find("name=\"node0\">\n    </testcase>"), std::string::npos) << xml;
  EXPECT_NE(job_report_html(doc).find("<b>node1</b>"), std::string::npos);
}

// job_ocp.jsonl: a FAIL diagnosis for the lost rank and the suspect host only, the run ERROR.
TEST(JobReportFiles, JobOcpFailsTheLostRankAndTheSuspectHostOnly) {
  auto rows = clean_rows(4, 2);
  lose(rows[3]);
  crash(rows[2], timeout_naming(2, {3}));
  const auto now = std::chrono::system_clock::now();
  const auto artifacts = job_ocp_artifacts(job_report_json(rows, {}), {"rocm-conformance-llm", "node0", now, now});
  std::vector<std::string> failed, passed;
  for (const auto& a : artifacts)
    if (a.contains("testStepArtifact") && a.at("testStepArtifact").contains("diagnosis")) {
      const auto& d = a.at("testStepArtifact").at("diagnosis");
      (d.at("type") == "PASS" ? passed : failed)
          .push_back(d.at("verdict").get<std::string>() + "@" + d.at("hardwareInfoId").get<std::string>());
    }
  EXPECT_EQ(failed,
            (std::vector<std::string>{"rank-CRASHED@hw-rank-2", "rank-LOST@hw-rank-3", "suspect-node@hw-rank-2"}));
  EXPECT_EQ(passed,
            (std::vector<std::string>{"rank-PASS@hw-rank-0", "rank-PASS@hw-rank-1", "node-not-suspect@hw-rank-0"}));
  EXPECT_EQ(artifacts.back().at("testRunArtifact").at("testRunEnd"),
            nlohmann::json({{"status", "ERROR"}, {"result", "FAIL"}}));
  const auto& hardware = artifacts.at(1).at("testRunArtifact").at("testRunStart").at("dutInfo").at("hardwareInfos");
  ASSERT_EQ(hardware.size(), 4u);
  EXPECT_EQ(hardware.at(3).at("computerSystem"), "node1");
  EXPECT_EQ(hardware.at(3).at("location"), "world rank 3, local rank 1");
}

}  // namespace RCL_UNITY_ID
}  // namespace
}  // namespace rcl
