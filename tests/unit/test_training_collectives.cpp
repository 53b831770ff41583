// report.json's `collectives.training` (reports/training_collectives.hpp): step records' samples
// in, one row per (group, kind, reduce op, dtype, bytes) out, every count and figure computed here
// from the inputs; then the report keeps the battery's keys beside it and report.html shows it.
#include <algorithm>
#include <filesystem>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "rocm_conformance_llm/checks/detectors/catalog.hpp"
#include "rocm_conformance_llm/reports/html_report.hpp"
#include "rocm_conformance_llm/reports/report.hpp"
#include "rocm_conformance_llm/reports/training_collectives.hpp"
#include "support/cli_runner.hpp"

namespace rcl {
namespace {
namespace RCL_UNITY_ID {

namespace fs = std::filesystem;
using json = nlohmann::json;
using rcl::testing::fresh_dir;
using rcl::testing::read_text;

CollectiveSample sample(std::string op, std::string group, std::string kind, std::string reduce_op, std::string dtype,
                        int64_t bytes, double seconds, double gbps) {
  return {.op = std::move(op),
          .bytes = bytes,
          .seconds = seconds,
          .bus_bandwidth_gbps = gbps,
          .kind = std::move(kind),
          .reduce_op = std::move(reduce_op),
          .dtype = std::move(dtype),
          .group = std::move(group)};
}

StepRecord step(int64_t n, std::vector<CollectiveSample> collectives) {
  StepRecord r;
  r.step = n;
  r.world_size = 2;
  r.collectives = std::move(collectives);
  return r;
}

// Independent of the code under test: sorted copy, linear interpolation between closest ranks.
double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double pos = q * double(v.size() - 1);
  const auto lo = static_cast<size_t>(pos);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - double(lo)) * (v[hi] - v[lo]);
}

const json* find_row(const json& rows, const std::string& group, const std::string& kind, const std::string& dtype,
                     int64_t bytes) {
  for (const auto& r : rows)
    if (r["group"] == group && r["kind"] == kind && r["dtype"] == dtype && r["bytes"] == bytes) return &r;
  return nullptr;
}

TEST(TrainingCollectives, RowsPerGroupKindOpDtypeAndSizeWithCountsMediansAndP95AfterWarmup) {
  TrainingCollectives table(/*warmup_steps=*/1);
  // Five steps: two DDP buckets of the same size (one row, two calls a step) and a smaller one,
  // a tensor-parallel all-reduce; step 1 (warm-up) is slow, as RCCL's first call sets up links.
  const std::vector<double> bucket_s = {9.0, 0.010, 0.030, 0.020, 0.040};
  const std::vector<double> bucket2_s = {9.0, 0.011, 0.031, 0.021, 0.041};
  const std::vector<double> small_s = {5.0, 0.002, 0.001, 0.004, 0.003};
  for (int i = 0; i < 5; ++i) {
    table.on_step(
        step(i + 1, {sample("allreduce", "world", "all_reduce", "sum", "Float", 4096, bucket_s[i], 1.0 / bucket_s[i]),
                     sample("allreduce", "world", "all_reduce", "sum", "Float", 4096, bucket2_s[i], 1.0 / bucket2_s[i]),
                     sample("allreduce", "world", "all_reduce", "sum", "Float", 100, small_s[i], 0.1 / small_s[i]),
                     sample("tp:all_reduce.block0.attn.out.fwd", "tp", "all_reduce", "sum", "BFloat16", 512,
                            0.001 * (i + 1), 2.0)}));
  }
  const json rows = table.rows();
  ASSERT_EQ(rows.size(), 3u) << rows.dump(1);

  const json* big = find_row(rows, "world", "all_reduce", "Float", 4096);
  ASSERT_NE(big, nullptr);
  std::vector<double> timed, gbps;
  for (int i = 1; i < 5; ++i) {  // after the warm-up step
    timed.insert(timed.end(), {bucket_s[i], bucket2_s[i]});
    gbps.insert(gbps.end(), {1.0 / bucket_s[i], 1.0 / bucket2_s[i]});
  }
  EXPECT_EQ((*big)["calls"], 10);
  EXPECT_EQ((*big)["timed_calls"], 8);
  EXPECT_EQ((*big)["total_bytes"], 10 * 4096);
  EXPECT_EQ((*big)["reduce_op"], "sum");
  EXPECT_EQ((*big)["ops"], json({"allreduce"}));
  EXPECT_DOUBLE_EQ((*big)["latency_median_s"].get<double>(), quantile(timed, 0.5));
  EXPECT_DOUBLE_EQ((*big)["latency_median_s"].get<double>(), (0.021 + 0.030) / 2);  // the middle two of eight
  EXPECT_DOUBLE_EQ((*big)["latency_p95_s"].get<double>(), quantile(timed, 0.95));
  EXPECT_LT((*big)["latency_p95_s"].get<double>(), 1.0) << "the warm-up step's 9 s is not a latency";
  EXPECT_DOUBLE_EQ((*big)["bus_bandwidth_gbps"].get<double>(), quantile(gbps, 0.5));

  const json* small = find_row(rows, "world", "all_reduce", "Float", 100);
  ASSERT_NE(small, nullptr);
  EXPECT_EQ((*small)["calls"], 5);
  EXPECT_DOUBLE_EQ((*small)["latency_median_s"].get<double>(), 0.0025);

  const json* tp = find_row(rows, "tp", "all_reduce", "BFloat16", 512);
  ASSERT_NE(tp, nullptr);
  EXPECT_EQ((*tp)["ops"], json({"tp:all_reduce.block0.attn.out.fwd"}));
  EXPECT_DOUBLE_EQ((*tp)["latency_median_s"].get<double>(), 0.0035);  // steps 2..5: 2, 3, 4, 5 ms

  // Sorted by group, kind, reduce op, dtype, then bytes (numerically: 100 before 4096).
  EXPECT_EQ(rows[0]["group"], "tp");
  EXPECT_EQ(rows[1]["bytes"], 100);
  EXPECT_EQ(rows[2]["bytes"], 4096);
}

TEST(TrainingCollectives, ReduceOpAndDtypeSplitRowsAndARowSeenOnlyInWarmupUsesIt) {
  TrainingCollectives table(/*warmup_steps=*/2);
  table.on_step(step(1, {sample("reduce_scatter_grads", "world", "reduce_scatter", "avg", "Float", 800, 0.5, 1.0),
                         sample("x", "world", "reduce_scatter", "sum", "Float", 800, 0.25, 1.0),
                         sample("allgather_params", "world", "all_gather", "", "Float", 800, 0.125, 1.0),
                         sample("allgather_params", "world", "all_gather", "", "BFloat16", 800, 0.0625, 1.0)}));
  const json rows = table.rows();
  ASSERT_EQ(rows.size(), 4u) << rows.dump(1);
  // all_gather < reduce_scatter; "" < "avg" < "sum"; "BFloat16" < "Float".
  EXPECT_EQ(rows[0]["dtype"], "BFloat16");
  EXPECT_EQ(rows[1]["dtype"], "Float");
  EXPECT_EQ(rows[1]["reduce_op"], "");
  EXPECT_EQ(rows[2]["reduce_op"], "avg");
  EXPECT_EQ(rows[3]["reduce_op"], "sum");
  EXPECT_EQ(rows[2]["timed_calls"], 1);
  EXPECT_DOUBLE_EQ(rows[2]["latency_median_s"].get<double>(), 0.5);
}

TEST(TrainingCollectives, LongRunsKeepEvenlySpreadSamplesAtABoundedSize) {
  TrainingCollectives table;
  constexpr int kCalls = 10000;
  // One collective a step, its latency the step's index: a long run's figures must reflect the
  // whole run, not its start or its end.
  for (int i = 0; i < kCalls; ++i)
    table.on_step(step(i + 1, {sample("allreduce", "world", "all_reduce", "sum", "Float", 64, double(i), 1.0)}));
  const json row = table.rows().at(0);
  EXPECT_EQ(row["calls"], kCalls);
  EXPECT_EQ(row["timed_calls"], kCalls);
  // Halved twice (at 4096 kept): every 4th sample, 0, 4, ..., 9996: 2500 kept, median (4996 + 5000) / 2.
  static_assert(TrainingCollectives::kMaxTimedSamples == 4096);
  EXPECT_DOUBLE_EQ(row["latency_median_s"].get<double>(), 4998.0);
  EXPECT_NEAR(row["latency_p95_s"].get<double>(), 0.95 * kCalls, 0.001 * kCalls);
}

TEST(TrainingCollectives, OneRankHasNoRows) {
  TrainingCollectives table;
  table.on_step(step(1, {}));
  EXPECT_TRUE(table.rows().empty());
}

fs::path report_dir(const std::string& name) {
  const fs::path dir = fresh_dir("training-collectives", name);
  fs::create_directories(dir);
  return dir;
}

TEST(TrainingCollectives, ReportKeepsTheBatteryKeysBesideTheTableAndTheHtmlShowsIt) {
  const fs::path dir = report_dir("report");
  FindingLog log(find_signature);
  RunSummary summary;
  TrainingCollectives table;
  ReportWriter writer(dir, 0, json::object(), json::object(), log, summary, 0);
  writer.set_training_collectives(table);
  const json battery = {
      {"world_size", 2}, {"batteries", 3}, {"seed", 7}, {"cases", json::array({{{"kind", "all_reduce"}}})}};
  writer.add_section("collectives", battery);
  table.on_step(step(1, {sample("allgather_params", "world", "all_gather", "", "Float", 2048, 0.002, 1.5)}));
  writer.write(RunOutcome::completed);
  const json report = json::parse(read_text(dir / "report.json"));
  for (const char* key : {"world_size", "batteries", "seed", "cases"})
    EXPECT_EQ(report["collectives"][key], battery[key]) << key;
  ASSERT_EQ(report["collectives"]["training"].size(), 1u);
  EXPECT_EQ(report["collectives"]["training"][0]["kind"], "all_gather");
  EXPECT_EQ(report["collectives"]["training"][0]["bytes"], 2048);
  const std::string html = read_text(dir / "report.html");
  ASSERT_NE(html.find("<table id=\"training-collectives\">"), std::string::npos);
  EXPECT_NE(html.find("<td>allgather_params</td>"), std::string::npos);
  EXPECT_NE(html.find("<td class=\"num\">1.5</td>"), std::string::npos);  // the bus bandwidth
}

TEST(TrainingCollectives, ReportWithoutTrainingCollectivesHasNoTableNorKey) {
  const fs::path dir = report_dir("empty");
  FindingLog log(find_signature);
  RunSummary summary;
  TrainingCollectives table;
  ReportWriter writer(dir, 0, json::object(), json::object(), log, summary, 0);
  writer.set_training_collectives(table);
  table.on_step(step(1, {}));
  writer.write(RunOutcome::completed);
  EXPECT_FALSE(json::parse(read_text(dir / "report.json")).contains("collectives"));
  const std::string html = read_text(dir / "report.html");
  ASSERT_NE(html.find("</html>"), std::string::npos) << "report.html was not written";
  EXPECT_EQ(html.find("training-collectives"), std::string::npos);
}

}  // namespace RCL_UNITY_ID
}  // namespace
}  // namespace rcl
