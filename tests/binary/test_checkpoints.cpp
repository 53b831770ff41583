// Checkpoints and resume through the real binary (also on a full disk): N steps straight equal
// N/2 + resume N/2 bit for bit (losses, gradient norms, final weights and optimizer state), a
// checkpoint on a stop signal, keep-last-K, the Hugging Face layouts, refusal of a checkpoint of
// another config or a damaged one (exit 2, one line, nothing written), and a write that fails
// (RLIMIT_FSIZE: what a full disk does to a write) ending in a crashed report with the earlier
// checkpoint intact. The files' building blocks in-process: tests/unit/test_checkpoint_files.cpp.
#include <signal.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "rocm_conformance_llm/base/safetensors.hpp"
#include "rocm_conformance_llm/base/sha256.hpp"
#include "rocm_conformance_llm/base/strings.hpp"
#include "rocm_conformance_llm/loop/trainer.hpp"
#include "rocm_conformance_llm/loop/training_state.hpp"
#include "rocm_conformance_llm/run/run_checkpoint.hpp"
#include "support/cli_runner.hpp"
#include "support/cpu_fp16.hpp"
#include "support/indexed_dataset_writer.hpp"
#include "support/safetensors_spec.hpp"

namespace rcl {
namespace {
namespace RCL_UNITY_ID {

namespace fs = std::filesystem;
using json = nlohmann::json;
using rcl::testing::BackgroundRun;
using rcl::testing::bytes_of;
using rcl::testing::fresh_dir;
using rcl::testing::read_text;
using rcl::testing::run_cli;
using rcl::testing::spec_read;
using rcl::testing::wait_until;
using namespace std::chrono_literals;

// The smoke preset on one CPU thread; dropout on so resuming must restore the RNG too.
const std::string kSmoke = "--preset smoke --device cpu --set num_threads=1 --set dropout=0.1 --set eval_interval=0 ";

// Complete lines only: a test polling a live run may read the next record half written (a line
// that getline ends at end of file instead of at its newline).
std::vector<json> metrics(const fs::path& dir) {
  std::vector<json> out;
  std::ifstream in(dir / "metrics.jsonl");
  for (std::string line; std::getline(in, line) && !in.eof();) out.push_back(json::parse(line));
  return out;
}

fs::path checkpoint(const fs::path& run, int64_t step) {
  return run / "checkpoints" / fmt::format("step-{:08d}", step);
}

// Step records of `a` and `b` agree bit for bit on the steps both have (loss and gradient norm
// as written: nlohmann::json prints doubles so they read back exactly).
void expect_same_steps(const std::vector<json>& a, const std::vector<json>& b, int64_t from, int64_t to) {
  std::map<int64_t, json> by_step;
  for (const auto& r : b) by_step[r["step"]] = r;
  int64_t compared = 0;
  for (const auto& r : a) {
    const int64_t step = r["step"];
    if (step < from || step > to) continue;
    ASSERT_TRUE(by_step.count(step)) << "step " << step << " missing";
    EXPECT_EQ(r["loss"].get<double>(), by_step[step]["loss"].get<double>()) << "step " << step;
    EXPECT_EQ(r["grad_norm"].get<double>(), by_step[step]["grad_norm"].get<double>()) << "step " << step;
    ++compared;
  }
  EXPECT_EQ(compared, to - from + 1);
}

struct ResumeCase {
  const char* name;
  std::string args;
  bool fp16 = false;  // needs fp16 matmul on the CPU (libtorch 2.x)
};

class ResumeIsBitExact : public ::testing::TestWithParam<ResumeCase> {};

TEST_P(ResumeIsBitExact, HalfThenResumeEqualsStraight) {
  const auto& c = GetParam();
  if (c.fp16) {
    RCL_REQUIRE_FP16_MATMUL();
  }
  const std::string args = kSmoke + c.args + " --steps 8 ";
  const fs::path straight = fresh_dir("ckpt", std::string(c.name) + "-straight");
  const fs::path resumed = fresh_dir("ckpt", std::string(c.name) + "-resumed");
  // The straight run writes checkpoints at 4 and 8 (writing one must not change the run).
  const auto a = run_cli(args + "--checkpoint-interval 4 --output-dir " + straight.string());
  ASSERT_EQ(a.exit_code, 0) << a.err;
  ASSERT_TRUE(fs::exists(checkpoint(straight, 4) / "manifest.json"));
  const auto b = run_cli(args + "--checkpoint-interval 4 --resume " + checkpoint(straight, 4).string() +
                         " --output-dir " + resumed.string());
  ASSERT_EQ(b.exit_code, 0) << b.err;
  const auto resumed_metrics = metrics(resumed);
  ASSERT_EQ(resumed_metrics.size(), 4u);
  EXPECT_EQ(resumed_metrics.front()["step"], 5);
  expect_same_steps(metrics(straight), resumed_metrics, 5, 8);
  // Final weights, optimizer moments and RNG states: the same bytes.
  for (const char* file : {"model.safetensors", "optimizer.safetensors", "rank-0.safetensors"})
    EXPECT_TRUE(bytes_of(checkpoint(straight, 8) / file) == bytes_of(checkpoint(resumed, 8) / file)) << file;
  const json report = json::parse(read_text(resumed / "report.json"));
  EXPECT_EQ(report.at("resume").at("step"), 4);
  fs::remove_all(straight);
  fs::remove_all(resumed);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ResumeIsBitExact,
    ::testing::Values(ResumeCase{"fp32", ""}, ResumeCase{"bf16_accum", "--precision bf16 --set grad_accum_steps=2"},
                      ResumeCase{"rng_replay", "--stress rng --set stress_profile.rng.replay_check_interval=3"},
                      // Mixture-of-experts blocks: stacked expert weights and the router (native layout).
                      ResumeCase{"moe", "--set moe_experts=4 --set moe_top_k=2"},
                      // The loss scaler (scale, clean streak, skipped steps) must come back too.
                      ResumeCase{"fp16", "--precision fp16 --set fp16_growth_interval=3", true}),
    [](const auto& info) { return std::string(info.param.name); });

// (signature, step) of every finding in a report, in order.
std::vector<std::pair<std::string, int64_t>> findings_of(const fs::path& dir) {
  const json report = json::parse(read_text(dir / "report.json"));  // outlives the loop
  std::vector<std::pair<std::string, int64_t>> out;
  for (const auto& f : report.at("findings")) out.emplace_back(f.at("signature"), f.at("step"));
  return out;
}

// Findings so far travel in the checkpoint: a run resumed at step 4 reports the findings of
// steps 1-4 (restored, once each) and then its own, exactly the uninterrupted run's list.
TEST(Checkpoints, FindingsSoFarAreRestoredOnceOnResume) {
  const std::string args = kSmoke + "--steps 8 --checkpoint-interval 4 --keep-checkpoints 3 --inject nan@step=3 ";
  const fs::path straight = fresh_dir("ckpt", "findings-straight");
  const fs::path resumed = fresh_dir("ckpt", "findings-resumed");
  const auto a = run_cli(args + "--output-dir " + straight.string());
  ASSERT_EQ(a.exit_code, 1) << a.err;  // the NaN step fails the run
  const auto b = run_cli(args + "--resume " + checkpoint(straight, 4).string() + " --output-dir " + resumed.string());
  ASSERT_EQ(b.exit_code, 1) << b.err;  // with the restored findings only: steps 5-8 are clean
  const auto expected = findings_of(straight);
  ASSERT_GE(expected.size(), 1u);
  for (const auto& [signature, step] : expected) EXPECT_EQ(step, 3) << signature;
  EXPECT_EQ(findings_of(resumed), expected);
  EXPECT_EQ(json::parse(read_text(resumed / "report.json")).at("resume").at("findings_restored"), expected.size());
  fs::remove_all(straight);
  fs::remove_all(resumed);
}

TEST(Checkpoints, WritingThemDoesNotChangeTheRun) {
  const fs::path plain = fresh_dir("ckpt", "plain");
  const fs::path with = fresh_dir("ckpt", "with");
  ASSERT_EQ(run_cli(kSmoke + "--steps 6 --output-dir " + plain.string()).exit_code, 0);
  ASSERT_EQ(run_cli(kSmoke + "--steps 6 --checkpoint-interval 2 --output-dir " + with.string()).exit_code, 0);
  expect_same_steps(metrics(plain), metrics(with), 1, 6);
  fs::remove_all(plain);
  fs::remove_all(with);
}

TEST(Checkpoints, KeepsTheLastKCompleteOnesAndHfConfig) {
  const fs::path dir = fresh_dir("ckpt", "keep");
  const auto r =
      run_cli(kSmoke + "--steps 7 --checkpoint-interval 2 --keep-checkpoints 2 --output-dir " + dir.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir / "checkpoints")) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  // 2, 4, 6 by interval, 7 at the end; the last two kept, no temporary left.
  EXPECT_EQ(names, (std::vector<std::string>{"step-00000006", "step-00000007"}));
  const json state = json::parse(read_text(checkpoint(dir, 7) / "state.json"));
  EXPECT_EQ(state["reason"], "final");
  EXPECT_EQ(state["step"], 7);
  // The smoke preset uses rotary positions: no Hugging Face architecture, our own model_type.
  EXPECT_EQ(json::parse(read_text(checkpoint(dir, 7) / "config.json"))["model_type"], "rcl-gpt");
  fs::remove_all(dir);
}

// The flags that give the smoke model a layout Hugging Face has (run/run_checkpoint.cpp's Layout).
const std::string kGpt2Layout = "--set position=learned ";
const std::string kLlamaLayout = "--set position=rotary --set norm=rmsnorm --set activation=swiglu ";
// Grouped-query attention: smoke's 4 query heads share 2 key/value heads (k_proj, v_proj narrower).
const std::string kLlamaGqaLayout = kLlamaLayout + "--set num_key_value_heads=2 ";

TEST(Checkpoints, Gpt2LayoutUsesHuggingFaceNamesAndConfig) {
  const fs::path dir = fresh_dir("ckpt", "gpt2");
  const auto r = run_cli(kSmoke + kGpt2Layout + "--steps 2 --checkpoint-interval 2 --output-dir " + dir.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json hf = json::parse(read_text(checkpoint(dir, 2) / "config.json"));
  EXPECT_EQ(hf["model_type"], "gpt2");
  EXPECT_EQ(hf["architectures"][0], "GPT2LMHeadModel");
  const int64_t c = hf["n_embd"], inner = hf["n_inner"], v = hf["vocab_size"], n = hf["n_positions"];
  const auto t = spec_read(checkpoint(dir, 2) / "model.safetensors");
  // GPT-2's names and its Conv1D layout ([in, out]); the LM head is tied (no lm_head tensor).
  EXPECT_EQ(t.at("transformer.wte.weight").shape, (std::vector<int64_t>{v, c}));
  EXPECT_EQ(t.at("transformer.wpe.weight").shape, (std::vector<int64_t>{n, c}));
  EXPECT_EQ(t.at("transformer.h.0.attn.c_attn.weight").shape, (std::vector<int64_t>{c, 3 * c}));
  EXPECT_EQ(t.at("transformer.h.1.attn.c_proj.weight").shape, (std::vector<int64_t>{c, c}));
  EXPECT_EQ(t.at("transformer.h.0.mlp.c_fc.weight").shape, (std::vector<int64_t>{c, inner}));
  EXPECT_EQ(t.at("transformer.h.0.mlp.c_proj.weight").shape, (std::vector<int64_t>{inner, c}));
  EXPECT_EQ(t.at("transformer.h.0.ln_1.bias").shape, (std::vector<int64_t>{c}));
  EXPECT_EQ(t.at("transformer.ln_f.weight").shape, (std::vector<int64_t>{c}));
  EXPECT_EQ(t.size(), 2u + 2u + 12u * size_t(hf["n_layer"].get<int64_t>()));
  // The synthetic corpus has no special tokens: none named, so GPT-2's 50256 is not implied.
  EXPECT_TRUE(hf["eos_token_id"].is_null()) << hf.dump();
  // And it resumes through the same names.
  const fs::path next = fresh_dir("ckpt", "gpt2-next");
  const auto resumed =
      run_cli(kSmoke + kGpt2Layout + "--steps 2 --resume " + dir.string() + " --output-dir " + next.string());
  EXPECT_EQ(resumed.exit_code, 0) << resumed.err;
  fs::remove_all(dir);
  fs::remove_all(next);
}

// Trained on a text file, the model's config names the byte tokenizer's BOS/EOS/pad (data.hpp),
// inside its vocabulary, so transformers generates and pads with the tokens it was trained on.
TEST(Checkpoints, TextDataExportsTheByteTokenizersSpecialTokens) {
  const fs::path dir = fresh_dir("ckpt", "byte-tokens");
  const fs::path text = dir.parent_path() / "byte-tokens.txt";
  std::ofstream(text) << std::string(4000, 'a') + " some text, repeated to fill the windows\n";
  const auto r = run_cli(kSmoke + kGpt2Layout + "--steps 1 --checkpoint-interval 1 --data " + text.string() +
                         " --output-dir " + dir.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json hf = json::parse(read_text(checkpoint(dir, 1) / "config.json"));
  EXPECT_EQ(hf["bos_token_id"], 256);
  EXPECT_EQ(hf["eos_token_id"], 257);
  EXPECT_EQ(hf["pad_token_id"], 258);
  EXPECT_LT(hf["eos_token_id"].get<int64_t>(), hf["vocab_size"].get<int64_t>());
  fs::remove_all(dir);
  fs::remove(text);
}

// Trained on an indexed dataset, the export carries its tokenizer: config.json's special ids are
// the sidecar's, tokenizer.json is the file the sidecar names (in the manifest, recorded in
// state.json). A tokenizer edited since the shards were written is not copied: a warning names
// it, and the rest of the export is written.
TEST(Checkpoints, IndexedDataExportsTheSidecarsTokenizer) {
  const fs::path dir = fresh_dir("ckpt", "sidecar-tokenizer"), tok = fresh_dir("ckpt", "sidecar-tokenizer-files");
  fs::create_directories(tok);
  const std::string tokenizer = (tok / "tokenizer.json").string();
  std::ofstream(tokenizer) << R"({"added_tokens": [{"id": 10, "content": "<eos>"}, {"id": 11, "content": "<bos>"}],)"
                           << R"( "model": {"type": "BPE", "vocab": {}, "merges": []}})";
  std::vector<std::vector<int64_t>> docs(40);
  for (auto& doc : docs) {
    doc.push_back(11);
    for (unsigned char c : std::string(100, 'a') + " text") doc.push_back(c);
    doc.push_back(10);
  }
  const std::string prefix = (tok / "shards").string();
  testing::write_indexed_dataset(prefix, docs);
  testing::write_sidecar(prefix, docs, 259);
  auto sidecar = json::parse(read_text(prefix + ".json"));
  sidecar["tokenizer"] = {{"path", tokenizer}, {"sha256", sha256_of_file(tokenizer)}};
  sidecar["special_ids"] = {{"bos", 11}, {"eos", 10}};
  std::ofstream(prefix + ".json") << sidecar.dump();
  const std::string args = kSmoke + "--steps 1 --checkpoint-interval 1 --data " + prefix + " --output-dir ";

  const auto r = run_cli(args + dir.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const fs::path ckpt = checkpoint(dir, 1);
  const json hf = json::parse(read_text(ckpt / "config.json"));
  EXPECT_EQ(hf["bos_token_id"], 11);
  EXPECT_EQ(hf["eos_token_id"], 10);
  EXPECT_TRUE(hf["pad_token_id"].is_null());
  EXPECT_EQ(read_text(ckpt / "tokenizer.json"), read_text(tokenizer));
  EXPECT_EQ(json::parse(read_text(ckpt / "tokenizer_config.json")),
            (json{{"tokenizer_class", "PreTrainedTokenizerFast"}, {"bos_token", "<bos>"}, {"eos_token", "<eos>"}}));
  const json manifest = json::parse(read_text(ckpt / "manifest.json"));
  EXPECT_EQ(manifest["files"]["tokenizer.json"], sha256_of_file(tokenizer));
  EXPECT_TRUE(manifest["files"].contains("tokenizer_config.json"));
  const json state = json::parse(read_text(ckpt / "state.json"));
  EXPECT_EQ(state["tokenizer"]["copied"], true) << state.dump();
  EXPECT_EQ(state["tokenizer"]["source"], tokenizer);

  std::ofstream(tokenizer, std::ios::app) << "\n";
  const fs::path changed = fresh_dir("ckpt", "sidecar-tokenizer-changed");
  const auto c = run_cli(args + changed.string());
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_NE((c.out + c.err).find("carries no tokenizer.json: the data's tokenizer '" + tokenizer + "'"),
            std::string::npos)
      << c.out << c.err;
  const fs::path unexported = checkpoint(changed, 1);
  EXPECT_TRUE(fs::exists(unexported / "model.safetensors"));
  EXPECT_EQ(json::parse(read_text(unexported / "config.json"))["eos_token_id"], 10);
  EXPECT_FALSE(fs::exists(unexported / "tokenizer.json"));
  EXPECT_FALSE(fs::exists(unexported / "tokenizer_config.json"));
  EXPECT_EQ(json::parse(read_text(unexported / "state.json"))["tokenizer"]["copied"], false);
  for (const auto& d : {dir, tok, changed}) fs::remove_all(d);
}

// A one-line refusal, exit 2, naming `expected`.
void expect_refused(const testing::CliResult& r, const std::string& expected) {
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find(expected), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

// Llama's layout (rotary, RMSNorm, SwiGLU): LlamaForCausalLM's names and config; Q, K, V and
// SwiGLU's gate and up stored as separate tensors, biases as attention_bias / mlp_bias load them.
TEST(Checkpoints, LlamaLayoutUsesHuggingFaceNamesAndConfig) {
  const std::string llama = kSmoke + kLlamaLayout;
  const fs::path dir = fresh_dir("ckpt", "llama");
  const auto r = run_cli(llama + "--steps 2 --checkpoint-interval 2 --output-dir " + dir.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json hf = json::parse(read_text(checkpoint(dir, 2) / "config.json"));
  EXPECT_EQ(hf["model_type"], "llama");
  EXPECT_EQ(hf["architectures"][0], "LlamaForCausalLM");
  EXPECT_EQ(hf["hidden_act"], "silu");
  EXPECT_EQ(hf["tie_word_embeddings"], true);
  const int64_t c = hf["hidden_size"], inner = hf["intermediate_size"], v = hf["vocab_size"];
  const int64_t layers = hf["num_hidden_layers"];
  EXPECT_EQ(hf["num_key_value_heads"], hf["num_attention_heads"]);
  const auto t = spec_read(checkpoint(dir, 2) / "model.safetensors");
  // nn.Linear's [out, in] as in transformers; no lm_head (tied), no position table (rotary).
  std::map<std::string, std::vector<int64_t>> expected = {{"model.embed_tokens.weight", {v, c}},
                                                          {"model.norm.weight", {c}}};
  for (int64_t i = 0; i < layers; ++i) {
    const std::string l = "model.layers." + std::to_string(i) + ".";
    for (const char* proj : {"q_proj", "k_proj", "v_proj", "o_proj"}) {
      expected[l + "self_attn." + proj + ".weight"] = {c, c};
      expected[l + "self_attn." + proj + ".bias"] = {c};
    }
    for (const char* proj : {"gate_proj", "up_proj"}) {
      expected[l + "mlp." + proj + ".weight"] = {inner, c};
      expected[l + "mlp." + proj + ".bias"] = {inner};
    }
    expected[l + "mlp.down_proj.weight"] = {c, inner};
    expected[l + "mlp.down_proj.bias"] = {c};
    expected[l + "input_layernorm.weight"] = {c};
    expected[l + "post_attention_layernorm.weight"] = {c};
  }
  std::map<std::string, std::vector<int64_t>> stored;
  for (const auto& [name, tensor] : t) {
    stored[name] = tensor.shape;
    EXPECT_EQ(tensor.dtype, "F32") << name;
  }
  EXPECT_EQ(stored, expected);
  // Q, K and V are distinct blocks of the fused projection (not one block three times).
  EXPECT_NE(t.at("model.layers.0.self_attn.q_proj.weight").bytes, t.at("model.layers.0.self_attn.k_proj.weight").bytes);
  // And it resumes through the same names, bit for bit.
  const fs::path next = fresh_dir("ckpt", "llama-next");
  const auto resumed =
      run_cli(llama + "--steps 2 --checkpoint-interval 2 --resume " + dir.string() + " --output-dir " + next.string());
  EXPECT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_TRUE(bytes_of(checkpoint(next, 2) / "model.safetensors") ==
              bytes_of(checkpoint(dir, 2) / "model.safetensors"));
  fs::remove_all(dir);
  fs::remove_all(next);
}

// Grouped-query attention in Llama's layout: config.json names num_key_value_heads, K and V are
// stored at their own (narrower) width, and the checkpoint resumes through them bit for bit.
// GPT-2 has no GQA: a learned-position GQA model keeps our own layout.
TEST(Checkpoints, GroupedQueryAttentionStoresNarrowKeyValueProjections) {
  const std::string llama = kSmoke + kLlamaGqaLayout;
  const fs::path dir = fresh_dir("ckpt", "llama-gqa");
  ASSERT_EQ(run_cli(llama + "--steps 2 --checkpoint-interval 2 --output-dir " + dir.string()).exit_code, 0);
  const json hf = json::parse(read_text(checkpoint(dir, 2) / "config.json"));
  EXPECT_EQ(hf["model_type"], "llama");
  EXPECT_EQ(hf["num_attention_heads"], 4);
  EXPECT_EQ(hf["num_key_value_heads"], 2);
  const int64_t c = hf["hidden_size"], kv = c / 2;
  const auto t = spec_read(checkpoint(dir, 2) / "model.safetensors");
  EXPECT_EQ(t.at("model.layers.0.self_attn.q_proj.weight").shape, (std::vector<int64_t>{c, c}));
  EXPECT_EQ(t.at("model.layers.0.self_attn.k_proj.weight").shape, (std::vector<int64_t>{kv, c}));
  EXPECT_EQ(t.at("model.layers.1.self_attn.v_proj.bias").shape, (std::vector<int64_t>{kv}));
  const fs::path next = fresh_dir("ckpt", "llama-gqa-next");
  const auto resumed =
      run_cli(llama + "--steps 2 --checkpoint-interval 2 --resume " + dir.string() + " --output-dir " + next.string());
  EXPECT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_TRUE(bytes_of(checkpoint(next, 2) / "model.safetensors") ==
              bytes_of(checkpoint(dir, 2) / "model.safetensors"));
  const fs::path gpt2 = fresh_dir("ckpt", "gpt2-gqa");
  ASSERT_EQ(run_cli(kSmoke + kGpt2Layout +
                    "--set num_key_value_heads=2 --steps 1 --checkpoint-interval 1 --output-dir " + gpt2.string())
                .exit_code,
            0);
  const json native = json::parse(read_text(checkpoint(gpt2, 1) / "config.json"));
  EXPECT_EQ(native["model_type"], "rcl-gpt");
  EXPECT_EQ(native["num_key_value_heads"], 2);
  fs::remove_all(dir);
  fs::remove_all(next);
  fs::remove_all(gpt2);
}

TEST(Resume, RefusesAnotherConfigAndDamagedCheckpoints) {
  const fs::path dir = fresh_dir("ckpt", "refuse");
  ASSERT_EQ(run_cli(kSmoke + "--steps 2 --checkpoint-interval 2 --output-dir " + dir.string()).exit_code, 0);
  const fs::path ckpt = checkpoint(dir, 2);
  const fs::path out = fresh_dir("ckpt", "refuse-out");
  const auto resume = [&](const std::string& extra) {
    return run_cli(kSmoke + "--steps 2 " + extra + " --resume " + ckpt.string() + " --output-dir " + out.string());
  };
  expect_refused(resume("--seed 7"), "training.seed=1234 (this run: 7)");
  expect_refused(resume("--set hidden_size=128"), "training.hidden_size=64 (this run: 128)");
  expect_refused(resume("--stress rng"), "stress modes");
  expect_refused(run_cli(kSmoke + "--resume " + (dir / "nothing").string() + " --output-dir " + out.string()),
                 "not a checkpoint");
  expect_refused(run_cli(kSmoke + "--resume latest --output-dir " + out.string()), "no complete checkpoint");
  EXPECT_FALSE(fs::exists(out));  // a refused run writes nothing, not even its directory

  // A flipped byte, a truncated file: the manifest's SHA-256 says so.
  const fs::path copy = fresh_dir("ckpt", "refuse-copy");
  const auto damaged = [&](const std::function<void(const fs::path&)>& damage) {
    fs::remove_all(copy);
    fs::copy(ckpt, copy, fs::copy_options::recursive);
    damage(copy);
    return run_cli(kSmoke + "--steps 2 --resume " + copy.string() + " --output-dir " + out.string());
  };
  expect_refused(damaged([](const fs::path& c) {
                   std::fstream f(c / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
                   f.seekp(200);
                   f.put('\x7f');
                 }),
                 "model.safetensors does not match its SHA-256");
  expect_refused(damaged([](const fs::path& c) { fs::resize_file(c / "optimizer.safetensors", 100); }),
                 "optimizer.safetensors does not match its SHA-256");
  expect_refused(damaged([](const fs::path& c) { fs::remove(c / "rank-0.safetensors"); }),
                 "missing rank-0.safetensors");
  // Hand-edited consistently (the manifest updated too): the loader checks names and shapes. It
  // runs once the model exists, yet before the run says or writes anything: one line, exit 2, and
  // no output directory.
  const auto edited = damaged([](const fs::path& c) {
    auto w = read_safetensors(c / "model.safetensors");
    std::vector<std::pair<std::string, torch::Tensor>> edited;
    for (auto& [name, t] : w.tensors) edited.emplace_back(name, name == "final_norm.weight" ? torch::ones({3}) : t);
    write_safetensors(c / "model.safetensors", edited);
    json manifest = json::parse(read_text(c / "manifest.json"));
    manifest["files"]["model.safetensors"] = sha256_of_file((c / "model.safetensors").string());
    std::ofstream(c / "manifest.json") << manifest.dump();
  });
  expect_refused(edited, "tensor 'final_norm.weight' is Float [3] where this model has Float [64]");
  EXPECT_TRUE(edited.err.starts_with("error: checkpoint ")) << edited.err;
  EXPECT_FALSE(fs::exists(out));
  fs::remove_all(dir);
  fs::remove_all(out);
  fs::remove_all(copy);
}

// SIGTERM mid-run: a checkpoint of the stop step, an interrupted report; `--resume latest` in the
// same directory finishes the run, and every step equals an uninterrupted run's.
TEST(Resume, AfterSigtermInPlaceMatchesAnUninterruptedRun) {
  const fs::path dir = fresh_dir("ckpt", "sigterm");
  const fs::path straight = fresh_dir("ckpt", "sigterm-straight");
  const std::string args = kSmoke + "--steps 150 --checkpoint-interval 1000 --output-dir " + dir.string();
  {
    BackgroundRun run(args, dir.string() + ".log");
    ASSERT_TRUE(wait_until([&] { return metrics(dir).size() >= 3; }, 120s)) << read_text(dir.string() + ".log");
    run.signal(SIGTERM);
    const auto code = run.wait(120s);
    ASSERT_TRUE(code);
    ASSERT_EQ(*code, 4) << read_text(dir.string() + ".log");
  }
  std::vector<fs::path> saved;
  for (const auto& e : fs::directory_iterator(dir / "checkpoints")) saved.push_back(e.path());
  ASSERT_EQ(saved.size(), 1u);
  const json state = json::parse(read_text(saved[0] / "state.json"));
  EXPECT_EQ(state["reason"], "signal");
  const int64_t stopped_at = state["step"];
  EXPECT_EQ(json::parse(read_text(dir / "report.json"))["interruption"]["step"], stopped_at);
  if (stopped_at >= 150) GTEST_SKIP() << "the run finished before the signal";

  const auto resumed = run_cli(args + " --resume latest");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  ASSERT_EQ(run_cli(kSmoke + "--steps 150 --output-dir " + straight.string()).exit_code, 0);
  const auto all = metrics(dir);
  ASSERT_EQ(all.size(), 150u);  // the steps up to the checkpoint, then the resumed ones, once each
  expect_same_steps(metrics(straight), all, 1, 150);
  fs::remove_all(dir);
  fs::remove_all(straight);
  fs::remove(dir.string() + ".log");
}

// One command starts and restarts the job (`--resume auto`, what torchrun --max-restarts and
// Slurm --requeue run again): SIGKILL mid-run (no handler, no final checkpoint), then the very
// same command resumes from the newest periodic checkpoint and finishes; every step equals an
// uninterrupted run's bit for bit, and report.json counts the restart and its step.
TEST(Resume, AutoRestartsTheSameCommandAfterSigkillBitExact) {
  const fs::path dir = fresh_dir("ckpt", "auto-kill");
  const fs::path straight = fresh_dir("ckpt", "auto-kill-straight");
  const std::string args = kSmoke + "--steps 200 --checkpoint-interval 10 --resume auto --output-dir " + dir.string();
  {
    BackgroundRun run(args, dir.string() + ".log");
    ASSERT_TRUE(wait_until([&] { return metrics(dir).size() >= 25; }, 120s)) << read_text(dir.string() + ".log");
    run.signal(SIGKILL);
    ASSERT_EQ(run.wait(60s), 128 + SIGKILL);
  }
  if (fs::exists(dir / "report.json")) GTEST_SKIP() << "the run finished before the kill";
  std::vector<int64_t> saved;
  for (const auto& e : fs::directory_iterator(dir / "checkpoints"))
    if (e.path().filename().string().starts_with("step-"))
      saved.push_back(std::stoll(e.path().filename().string().substr(5)));
  ASSERT_FALSE(saved.empty());
  const int64_t newest = *std::max_element(saved.begin(), saved.end());

  const auto again = run_cli(args);
  ASSERT_EQ(again.exit_code, 0) << again.err;
  ASSERT_EQ(run_cli(kSmoke + "--steps 200 --output-dir " + straight.string()).exit_code, 0);
  const auto all = metrics(dir);
  ASSERT_EQ(all.size(), 200u);  // the steps up to the checkpoint, then the resumed ones, once each
  expect_same_steps(metrics(straight), all, 1, 200);
  const json restarts = json::parse(read_text(dir / "report.json")).at("restarts");
  EXPECT_EQ(restarts.at("count"), 1) << restarts;
  ASSERT_EQ(restarts.at("attempts").size(), 2u) << restarts;
  EXPECT_EQ(restarts.at("attempts")[0].at("from_step"), 0);
  EXPECT_EQ(restarts.at("attempts")[1].at("from_step"), newest);
  EXPECT_EQ(json::parse(read_text(dir / "report.json")).at("resume").at("step"), newest);
  fs::remove_all(dir);
  fs::remove_all(straight);
  fs::remove(dir.string() + ".log");
}

// `--resume auto` in a directory with a run but no checkpoint: this job's own earlier attempt
// (the same configuration) starts again fresh; another run's results are refused (exit 2), never
// overwritten. `--resume latest` keeps refusing where there is no checkpoint.
TEST(Resume, AutoWithoutACheckpointStartsFreshOnlyOverItsOwnAttempt) {
  const fs::path dir = fresh_dir("ckpt", "auto-fresh");
  const std::string args = kSmoke + "--steps 3 --output-dir " + dir.string();
  ASSERT_EQ(run_cli(args).exit_code, 0);
  expect_refused(run_cli(args + " --seed 7 --resume auto"),
                 "holds another run (config.json: training.seed=1234 (this run: 7))");
  expect_refused(run_cli(args + " --resume latest"), "no complete checkpoint");
  const auto again = run_cli(args + " --resume auto");
  ASSERT_EQ(again.exit_code, 0) << again.err;
  const json report = json::parse(read_text(dir / "report.json"));
  EXPECT_EQ(report.at("restarts").at("count"), 0);  // the first run was not under --resume auto
  EXPECT_FALSE(report.contains("resume"));
  EXPECT_EQ(metrics(dir).size(), 3u);
  fs::remove_all(dir);
}

// A write that fails half way (RLIMIT_FSIZE makes write() fail with EFBIG, as a full disk fails
// with ENOSPC): the run ends crashed (exit 3) with a report that says why, and the checkpoints
// written before are untouched; the same resume succeeds once the files fit.
TEST(Checkpoints, AFailedWriteEndsCrashedAndKeepsTheEarlierCheckpoints) {
  const fs::path dir = fresh_dir("ckpt", "fsize");
  const std::string args = kSmoke + "--steps 4 --checkpoint-interval 2 --output-dir " + dir.string();
  ASSERT_EQ(run_cli(args).exit_code, 0);
  const std::string at2 = bytes_of(checkpoint(dir, 2) / "model.safetensors");
  const std::string at4 = bytes_of(checkpoint(dir, 4) / "model.safetensors");
  ASSERT_GT(at2.size(), 200'000u);  // larger than the limit below; reports are smaller
  const std::string resume = args + " --resume " + checkpoint(dir, 2).string();
  const auto r = run_cli(resume, "trap '' XFSZ; prlimit --fsize=131072");
  EXPECT_EQ(r.exit_code, 3) << r.err;
  const json report = json::parse(read_text(dir / "report.json"));
  EXPECT_EQ(report["outcome"], "crashed");
  EXPECT_NE(report.dump().find("File too large"), std::string::npos) << report.dump();
  EXPECT_TRUE(bytes_of(checkpoint(dir, 2) / "model.safetensors") == at2);
  EXPECT_TRUE(bytes_of(checkpoint(dir, 4) / "model.safetensors") == at4);
  // Without the limit the same resume finishes and rewrites step 4 with the same bytes.
  const auto again = run_cli(resume);
  EXPECT_EQ(again.exit_code, 0) << again.err;
  EXPECT_TRUE(bytes_of(checkpoint(dir, 4) / "model.safetensors") == at4);
  EXPECT_EQ(json::parse(read_text(dir / "report.json"))["outcome"], "completed");
  fs::remove_all(dir);
}

#ifdef RCL_PYTHON_TRANSFORMERS
// The Hugging Face layouts mean what Hugging Face means: transformers (python3-transformers, in
// the libtorch 2.x lane's root) loads a trained checkpoint as GPT2LMHeadModel / LlamaForCausalLM
// with every weight used and none missing, and computes the logits our model computes for the
// same tokens (tests/transformers_parity.py). Names, transposes, norms, activations, rotary form
// and config keys all show in the logits.
class TransformersLoads : public ::testing::TestWithParam<std::pair<const char*, const std::string*>> {};

TEST_P(TransformersLoads, OurCheckpointAndComputesOurLogits) {
  const auto [name, layout] = GetParam();
  const fs::path dir = fresh_dir("ckpt", std::string("hf-") + name);
  const auto r = run_cli(kSmoke + *layout + "--steps 3 --checkpoint-interval 3 --output-dir " + dir.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const fs::path ckpt = checkpoint(dir, 3);

  // Our logits, from the checkpoint through our own loader, dropout off.
  RunContext ctx;
  ctx.cfg = json::parse(read_text(ckpt / "state.json")).at("training").get<TrainingConfig>();
  Trainer trainer(ctx);
  load_training_state(trainer, ckpt);
  trainer.model()->eval();
  torch::NoGradGuard no_grad;
  const auto& cfg = trainer.model_config();  // vocab_size resolved from the data
  const auto tokens = ((torch::arange(cfg.seq_len, torch::kLong) * 7 + 3) % cfg.vocab_size).unsqueeze(0);
  const auto logits = trainer.model()->forward(tokens);
  write_safetensors(dir / "parity.safetensors", {{"tokens", tokens}, {"logits", logits.contiguous()}});

  const fs::path log = dir / "parity.log";
  const std::string cmd = "HF_HUB_OFFLINE=1 python3 " RCL_SOURCE_DIR "/tests/transformers_parity.py " + ckpt.string() +
                          " " + (dir / "parity.safetensors").string() + " >" + log.string() + " 2>&1";
  const int status = std::system(cmd.c_str());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << read_text(log);
  std::cout << name << ": " << read_text(log);
  if (!HasFailure()) fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Layouts, TransformersLoads,
                         ::testing::Values(std::pair{"gpt2", &kGpt2Layout}, std::pair{"llama", &kLlamaLayout},
                                           std::pair{"llama_gqa", &kLlamaGqaLayout}),
                         [](const auto& info) { return std::string(info.param.first); });
#endif

}  // namespace RCL_UNITY_ID
}  // namespace
}  // namespace rcl
