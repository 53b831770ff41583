#include "rocm_conformance_llm/run/run_checkpoint.hpp"

#include <algorithm>
#include <array>
#include <fstream>
#include <span>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "rocm_conformance_llm/base/files.hpp"
#include "rocm_conformance_llm/base/safetensors.hpp"
#include "rocm_conformance_llm/base/sha256.hpp"
#include "rocm_conformance_llm/base/strings.hpp"
#include "rocm_conformance_llm/loop/trainer.hpp"
#include "rocm_conformance_llm/model.hpp"

namespace rcl {
namespace fs = std::filesystem;

namespace {

constexpr int kFormatVersion = 1;
constexpr const char* kPhase = "checkpoint";  // what the watchdog and heartbeat.json call a write
constexpr const char* kFormatName = "rocm-conformance-llm checkpoint";
constexpr const char* kManifest = "manifest.json";
constexpr const char* kState = "state.json";
constexpr const char* kWeights = "model.safetensors";
constexpr const char* kOptimizer = "optimizer.safetensors";
constexpr const char* kHfConfig = "config.json";
std::string rank_file(int rank) { return fmt::format("rank-{}.safetensors", rank); }
std::string findings_file(int rank) { return fmt::format("findings-rank-{}.json", rank); }
std::string step_dir_name(int64_t step) { return fmt::format("step-{:08d}", step); }

// ---- Hugging Face names -------------------------------------------------------------------
// The decoder maps onto a Hugging Face architecture when it computes what that one computes:
//   GPT-2 (GPT2LMHeadModel): learned positions, LayerNorm before each branch, GELU;
//   Llama (LlamaForCausalLM): rotary positions in the "rotate half" form, RMSNorm before each
//     branch, SwiGLU (silu(gate) * up); our Linear biases load through Llama's attention_bias
//     and mlp_bias (transformers >= 4.41).
// Neither with Q/K norm or a Q/K/V convolution; the LM head is tied to the embedding in both.
enum class Layout { native, gpt2, llama };
constexpr const char* kLayoutNames[] = {"native", "gpt2", "llama"};

Layout layout_of(const TrainingConfig& c) {
  if (c.norm_layout != "pre" || c.qk_norm || c.qkv_conv_kernel != 0) return Layout::native;
  if (c.position == "learned" && c.norm == "layernorm" && c.activation == "gelu") return Layout::gpt2;
  if (c.position == "rotary" && c.norm == "rmsnorm" && c.activation == "swiglu") return Layout::llama;
  return Layout::native;
}

// Our module path -> the stored names. A fused tensor is stored as equal row blocks, one name
// each (Llama: Q, K, V of attn.qkv; gate and up of SwiGLU's mlp.up, in that order: the first
// half goes through silu). GPT-2's Conv1D stores a Linear weight transposed ([in, out]).
struct NameRule {
  const char* native;
  std::array<const char*, 3> stored;  // the row blocks' names; nullptr-terminated
  bool transpose;
};
constexpr NameRule kGpt2Top[] = {{"wte.", {"transformer.wte."}, false},
                                 {"wpe.", {"transformer.wpe."}, false},
                                 {"final_norm.", {"transformer.ln_f."}, false}};
constexpr NameRule kGpt2Block[] = {{"norm_attn.", {"ln_1."}, false},  {"attn.qkv.", {"attn.c_attn."}, true},
                                   {"attn.proj.", {"attn.c_proj."}, true}, {"norm_mlp.", {"ln_2."}, false},
                                   {"mlp.up.", {"mlp.c_fc."}, true},   {"mlp.down.", {"mlp.c_proj."}, true}};
constexpr NameRule kLlamaTop[] = {{"wte.", {"model.embed_tokens."}, false}, {"final_norm.", {"model.norm."}, false}};
constexpr NameRule kLlamaBlock[] = {
    {"norm_attn.", {"input_layernorm."}, false},
    {"attn.qkv.", {"self_attn.q_proj.", "self_attn.k_proj.", "self_attn.v_proj."}, false},
    {"attn.proj.", {"self_attn.o_proj."}, false},
    {"norm_mlp.", {"post_attention_layernorm."}, false},
    {"mlp.up.", {"mlp.gate_proj.", "mlp.up_proj."}, false},
    {"mlp.down.", {"mlp.down_proj."}, false}};

struct StoredNames {
  std::vector<std::string> names;  // one per row block of the parameter
  bool transpose = false;
};

std::optional<StoredNames> apply_rules(std::string_view name, std::span<const NameRule> rules, const std::string& prefix) {
  for (const auto& r : rules)
    if (name.starts_with(r.native)) {
      const std::string_view leaf = name.substr(std::string_view(r.native).size());
      StoredNames out{.transpose = r.transpose && leaf == "weight"};
      for (const char* stored : r.stored)
        if (stored != nullptr) out.names.push_back(prefix + stored + std::string(leaf));
      return out;
    }
  return std::nullopt;
}

StoredNames hf_names(const std::string& native, Layout layout) {
  const bool gpt2 = layout == Layout::gpt2;
  std::optional<StoredNames> mapped;
  if (native.starts_with("block")) {
    const auto dot = native.find('.');
    const std::string index = native.substr(5, dot - 5);
    mapped = apply_rules(std::string_view(native).substr(dot + 1), gpt2 ? std::span<const NameRule>(kGpt2Block) : kLlamaBlock,
                         (gpt2 ? "transformer.h." : "model.layers.") + index + ".");
  } else {
    mapped = apply_rules(native, gpt2 ? std::span<const NameRule>(kGpt2Top) : kLlamaTop, "");
  }
  if (!mapped) throw std::logic_error(fmt::format("no {} name for parameter {}", kLayoutNames[int(layout)], native));
  return *mapped;
}

// Each parameter's names in model.safetensors.
std::vector<std::pair<std::string, StoredNames>> stored_names(GPT& model, Layout layout) {
  std::vector<std::pair<std::string, StoredNames>> out;
  for (const auto& item : model->named_parameters())
    out.emplace_back(item.key(), layout == Layout::native ? StoredNames{{item.key()}} : hf_names(item.key(), layout));
  return out;
}

nlohmann::json hf_config(const TrainingConfig& c, Layout layout) {
  if (layout == Layout::gpt2)
    return {{"architectures", {"GPT2LMHeadModel"}}, {"model_type", "gpt2"}, {"vocab_size", c.vocab_size},
            {"n_positions", c.seq_len}, {"n_embd", c.hidden_size}, {"n_layer", c.num_layers},
            {"n_head", c.num_heads}, {"n_inner", ffn_hidden_size(c)}, {"activation_function", "gelu"},
            {"layer_norm_epsilon", 1e-5}, {"resid_pdrop", c.dropout}, {"embd_pdrop", c.dropout},
            {"attn_pdrop", c.dropout}, {"tie_word_embeddings", true}, {"torch_dtype", "float32"}};
  if (layout == Layout::llama)
    return {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"vocab_size", c.vocab_size},
            {"max_position_embeddings", c.seq_len}, {"hidden_size", c.hidden_size},
            {"intermediate_size", ffn_hidden_size(c)}, {"num_hidden_layers", c.num_layers},
            {"num_attention_heads", c.num_heads}, {"num_key_value_heads", c.num_heads},
            {"head_dim", c.hidden_size / c.num_heads}, {"hidden_act", "silu"}, {"rms_norm_eps", 1e-5},
            {"rope_theta", 10000.0}, {"attention_bias", true}, {"mlp_bias", true},
            {"attention_dropout", c.dropout}, {"tie_word_embeddings", true}, {"torch_dtype", "float32"}};
  // No Hugging Face architecture has this layout: the same keys' meaning, our own model_type.
  return {{"architectures", {"RclGPT"}}, {"model_type", "rcl-gpt"}, {"vocab_size", c.vocab_size},
          {"max_position_embeddings", c.seq_len}, {"hidden_size", c.hidden_size},
          {"num_hidden_layers", c.num_layers}, {"num_attention_heads", c.num_heads},
          {"intermediate_size", ffn_hidden_size(c)}, {"hidden_act", c.activation}, {"norm", c.norm},
          {"norm_layout", c.norm_layout}, {"position_embedding", c.position}, {"qk_norm", c.qk_norm},
          {"qkv_conv_kernel", c.qkv_conv_kernel}, {"tie_word_embeddings", true}, {"torch_dtype", "float32"}};
}

// ---- reading ------------------------------------------------------------------------------
nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path);
  if (!in) throw CheckpointError("checkpoint " + path.parent_path().string() + ": missing " + path.filename().string());
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError("checkpoint " + path.parent_path().string() + ": " + path.filename().string() +
                          " is not valid JSON (" + e.what() + ")");
  }
}

// A complete checkpoint: its manifest exists (written last, after every file it names).
bool is_complete(const fs::path& dir) { return fs::is_regular_file(dir / kManifest); }

std::optional<int64_t> step_of(const fs::path& dir) {
  const std::string name = dir.filename().string();
  if (!name.starts_with("step-")) return std::nullopt;
  return parse_number<int64_t>(std::string_view(name).substr(5));
}

// Complete checkpoints under `root`, oldest first.
std::vector<fs::path> checkpoints_in(const fs::path& root) {
  std::vector<std::pair<int64_t, fs::path>> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root, ec))
    if (const auto step = step_of(entry.path()); step && entry.is_directory() && is_complete(entry.path()))
      found.emplace_back(*step, entry.path());
  std::sort(found.begin(), found.end());
  std::vector<fs::path> out;
  for (auto& [step, path] : found) out.push_back(std::move(path));
  return out;
}

void verify_manifest(const fs::path& dir) {
  const auto manifest = read_json(dir / kManifest);
  if (manifest.value("format", "") != kFormatName || !manifest.contains("files") || !manifest["files"].is_object())
    throw CheckpointError("checkpoint " + dir.string() + ": manifest.json is not a " + kFormatName + " manifest");
  for (const char* required : {kState, kWeights, kOptimizer, kHfConfig})
    if (!manifest["files"].contains(required))
      throw CheckpointError("checkpoint " + dir.string() + ": manifest.json does not list " + required);
  for (const auto& [name, digest] : manifest["files"].items()) {
    if (name.find('/') != std::string::npos || !digest.is_string())
      throw CheckpointError("checkpoint " + dir.string() + ": manifest.json entry '" + name + "' is malformed");
    const fs::path file = dir / name;
    if (!fs::is_regular_file(file)) throw CheckpointError("checkpoint " + dir.string() + ": missing " + name);
    if (sha256_of_file(file.string()) != digest.get<std::string>())
      throw CheckpointError("checkpoint " + dir.string() + ": " + name +
                            " does not match its SHA-256 in manifest.json (truncated, corrupted or edited)");
  }
}

// The first difference between what the checkpoint was and what this run is, if any.
std::optional<std::string> identity_difference(const nlohmann::json& state, const RunIdentity& now) {
  const int then_world = state.value("world_size", -1);
  if (then_world != now.world_size)
    return fmt::format("world size {} (this run: {})", then_world, now.world_size);
  const auto then_modes = state.value("stress_modes", std::vector<std::string>{});
  if (then_modes != now.stress_modes)
    return fmt::format("stress modes [{}] (this run: [{}])", join(then_modes, ","), join(now.stress_modes, ","));
  const auto& then = state.at("training");
  for (const auto& [key, value] : now.training.items()) {
    if (std::ranges::find(kResumeMayDiffer, key) != std::end(kResumeMayDiffer)) continue;
    if (!then.contains(key)) return fmt::format("no training.{} (this run: {})", key, value.dump());
    if (then[key] != value) return fmt::format("training.{}={} (this run: {})", key, then[key].dump(), value.dump());
  }
  return std::nullopt;
}

torch::Tensor require(const SafetensorsFile& file, const std::string& name, const fs::path& path,
                      c10::ScalarType dtype, std::optional<std::vector<int64_t>> shape = std::nullopt) {
  const auto it = file.tensors.find(name);
  if (it == file.tensors.end()) throw CheckpointError(fmt::format("checkpoint {}: no tensor '{}'", path.string(), name));
  const auto& t = it->second;
  if (t.scalar_type() != dtype || (shape && t.sizes().vec() != *shape))
    throw CheckpointError(fmt::format("checkpoint {}: tensor '{}' is {} {} where this model has {} {}",
                                      path.string(), name, c10::toString(t.scalar_type()), c10::str(t.sizes()),
                                      c10::toString(dtype), shape ? c10::str(c10::IntArrayRef(*shape)) : c10::str(t.sizes())));
  return t;
}

// ---- writing ------------------------------------------------------------------------------
// Rename `from` onto `to` (a directory): an existing `to` (the same step written again after a
// resume) is moved aside first and removed once the new one is in place.
void replace_directory(const fs::path& from, const fs::path& to) {
  if (fs::exists(to)) {
    const fs::path aside = to.parent_path() / (".old-" + to.filename().string());
    fs::remove_all(aside);
    fs::rename(to, aside);
    fs::rename(from, to);
    fs::remove_all(aside);
  } else {
    fs::rename(from, to);
  }
}

// The files `rank` writes into checkpoint directory `dir`: its RNG states and its findings;
// with `shared` (rank 0, or a private checkpoint), also those of the whole run: weights,
// optimizer moments, the Hugging Face config and state.json.
void write_checkpoint_files(Trainer& trainer, const Trainer::Snapshot& snap, const fs::path& dir, int rank, bool shared,
                            const std::vector<Finding>& findings_so_far, const RunIdentity& identity,
                            const std::string& reason) {
  std::vector<std::pair<std::string, torch::Tensor>> rng{{"rng.cpu", snap.rng.cpu_state}};
  if (snap.rng.device_state.defined()) rng.emplace_back("rng.device", snap.rng.device_state);
  write_safetensors(dir / rank_file(rank), rng);
  nlohmann::json findings = nlohmann::json::array();
  for (const auto& f : findings_so_far) findings.push_back(to_json(f));
  write_file_synced(dir / findings_file(rank), {nlohmann::json{{"findings", findings}}.dump(2) + "\n"});
  if (!shared) return;
  const auto& cfg = trainer.ctx().cfg;
  const Layout layout = layout_of(cfg);
  std::vector<std::pair<std::string, torch::Tensor>> weights;
  auto params = trainer.model()->named_parameters();
  for (const auto& [native, stored] : stored_names(trainer.model(), layout)) {
    const auto blocks = params[native].chunk(static_cast<int64_t>(stored.names.size()), 0);
    for (size_t i = 0; i < blocks.size(); ++i)
      weights.emplace_back(stored.names[i], stored.transpose ? blocks[i].t() : blocks[i]);
  }
  write_safetensors(dir / kWeights, weights, {{"format", "pt"}});
  write_safetensors(dir / kOptimizer, {{"exp_avg", snap.optimizer.exp_avg}, {"exp_avg_sq", snap.optimizer.exp_avg_sq}});
  write_file_synced(dir / kHfConfig, {hf_config(cfg, layout).dump(2) + "\n"});
  nlohmann::json scaler = nullptr;
  if (snap.scaler) {
    const auto s = snap.scaler->state();
    scaler = {{"scale", s.scale}, {"clean_streak", s.clean_streak}, {"skipped_steps", s.skipped_steps}};
  }
  const nlohmann::json state = {{"format", kFormatName}, {"version", kFormatVersion}, {"reason", reason},
                                {"step", snap.step}, {"micro_batches", snap.micro_batches},
                                {"optimizer_steps", snap.optimizer.steps}, {"loss_scaler", scaler},
                                {"weights", kLayoutNames[int(layout)]}, {"world_size", identity.world_size},
                                {"stress_modes", identity.stress_modes}, {"training", identity.training}};
  write_file_synced(dir / kState, {state.dump(2) + "\n"});
}

}  // namespace

CheckpointPolicy parse_checkpoint_policy(const std::string& interval, int64_t keep) {
  if (keep < 1) throw ConfigError(fmt::format("invalid --keep-checkpoints '{}': must be an integer >= 1", keep));
  CheckpointPolicy p;
  p.keep = keep;
  if (interval.empty()) return p;
  if (const auto steps = parse_number<int64_t>(interval)) {
    if (*steps < 1)
      throw ConfigError(fmt::format("invalid --checkpoint-interval '{}': a step count must be >= 1", interval));
    p.every_steps = *steps;
  } else {
    p.every_s = parse_duration_s("--checkpoint-interval", interval);
  }
  return p;
}

ResumePoint resolve_resume(const std::string& spec, const fs::path& output_dir, const RunIdentity& now) {
  fs::path dir;
  if (spec == "latest") {
    const auto found = checkpoints_in(output_dir / "checkpoints");
    if (found.empty())
      throw CheckpointError("--resume latest: no complete checkpoint under " + (output_dir / "checkpoints").string());
    dir = found.back();
  } else if (fs::is_regular_file(fs::path(spec) / kState) || fs::is_regular_file(fs::path(spec) / kManifest)) {
    dir = spec;
  } else if (fs::is_directory(fs::path(spec) / "checkpoints")) {
    const auto found = checkpoints_in(fs::path(spec) / "checkpoints");
    if (found.empty()) throw CheckpointError("--resume '" + spec + "': no complete checkpoint under its checkpoints/");
    dir = found.back();
  } else {
    throw CheckpointError("--resume '" + spec + "': not a checkpoint, a run directory with checkpoints/, or 'latest'");
  }
  dir = fs::weakly_canonical(dir);
  verify_manifest(dir);
  const auto state = read_json(dir / kState);
  if (state.value("format", "") != kFormatName || state.value("version", 0) != kFormatVersion ||
      !state.contains("training") || !state["training"].is_object())
    throw CheckpointError(fmt::format("checkpoint {}: state.json is not a version {} {}", dir.string(),
                                      kFormatVersion, kFormatName));
  if (const auto diff = identity_difference(state, now))
    throw CheckpointError(fmt::format("--resume: checkpoint {} was written with {}; resume with the same "
                                      "configuration",
                                      dir.string(), *diff));
  try {
    return {dir, state.at("step").get<int64_t>()};
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError("checkpoint " + dir.string() + ": state.json: " + e.what());
  }
}

void load_checkpoint(Trainer& trainer, const fs::path& dir) {
  const auto state = read_json(dir / kState);
  const auto& cfg = trainer.ctx().cfg;
  const Layout layout = layout_of(cfg);
  if (state.value("weights", "") != kLayoutNames[int(layout)])
    throw CheckpointError("checkpoint " + dir.string() + ": state.json's weights layout does not fit this model");
  torch::NoGradGuard no_grad;
  // Weights: by name, shape and dtype, into the parameters (views of the optimizer's flat buffer).
  const auto weights = read_safetensors(dir / kWeights);
  const auto names = stored_names(trainer.model(), layout);
  size_t stored_tensors = 0;
  for (const auto& [native, stored] : names) stored_tensors += stored.names.size();
  if (weights.tensors.size() != stored_tensors)
    throw CheckpointError(fmt::format("checkpoint {}: {} holds {} tensors, this model stores {}", dir.string(),
                                      kWeights, weights.tensors.size(), stored_tensors));
  auto params = trainer.model()->named_parameters();
  for (const auto& [native, stored] : names) {
    auto& param = params[native];
    auto shape = param.sizes().vec();
    shape[0] /= static_cast<int64_t>(stored.names.size());
    if (stored.transpose) std::swap(shape[0], shape[1]);
    std::vector<torch::Tensor> blocks;
    for (const auto& name : stored.names) {
      const auto t = require(weights, name, dir / kWeights, param.scalar_type(), shape);
      blocks.push_back(stored.transpose ? t.t() : t);
    }
    param.copy_(torch::cat(blocks, 0));
  }
  // Everything else a step reads, through the trainer's own restore.
  auto snap = trainer.snapshot();
  const auto optimizer = read_safetensors(dir / kOptimizer);
  const std::vector<int64_t> flat{snap.optimizer.exp_avg.numel()};
  snap.optimizer.exp_avg = require(optimizer, "exp_avg", dir / kOptimizer, snap.optimizer.exp_avg.scalar_type(), flat);
  snap.optimizer.exp_avg_sq =
      require(optimizer, "exp_avg_sq", dir / kOptimizer, snap.optimizer.exp_avg_sq.scalar_type(), flat);
  const fs::path rank_path = dir / rank_file(trainer.sync().rank());
  const auto rng = read_safetensors(rank_path);
  snap.rng.cpu_state = require(rng, "rng.cpu", rank_path, c10::ScalarType::Byte);
  if (const auto it = rng.tensors.find("rng.device"); it != rng.tensors.end()) snap.rng.device_state = it->second;
  try {
    snap.step = state.at("step").get<int64_t>();
    snap.micro_batches = state.at("micro_batches").get<int64_t>();
    snap.optimizer.steps = state.at("optimizer_steps").get<int64_t>();
    const auto& scaler = state.at("loss_scaler");
    if (snap.scaler.has_value() != !scaler.is_null())
      throw CheckpointError("checkpoint " + dir.string() + ": loss scaler state does not fit this precision");
    if (snap.scaler)
      snap.scaler->load_state({scaler.at("scale").get<double>(), scaler.at("clean_streak").get<int64_t>(),
                               scaler.at("skipped_steps").get<int64_t>()});
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError("checkpoint " + dir.string() + ": state.json: " + e.what());
  }
  trainer.restore(std::move(snap));
}

std::vector<Finding> checkpoint_findings(const fs::path& dir, int rank) {
  const fs::path path = dir / findings_file(rank);
  if (!fs::exists(path)) return {};
  const nlohmann::json doc = read_json(path);  // alive through the loop (not a range-for temporary)
  std::vector<Finding> out;
  try {
    for (const auto& item : doc.at("findings")) {
      Finding f = finding_from_json(item);
      if (f.step >= 1) out.push_back(std::move(f));
    }
  } catch (const CheckpointError&) {
    throw;
  } catch (const std::exception& e) {  // JSON of another shape, a malformed finding
    throw CheckpointError("checkpoint " + dir.string() + ": " + path.filename().string() + ": " + e.what());
  }
  return out;
}

void save_private_checkpoint(Trainer& trainer, const fs::path& dir) {
  fs::remove_all(dir);
  fs::create_directories(dir);
  const RunIdentity identity{.world_size = trainer.sync().world_size()};
  write_checkpoint_files(trainer, trainer.snapshot(), dir, trainer.sync().rank(), /*shared=*/true, {}, identity,
                         "private");
}

Checkpointer::Checkpointer(Trainer& trainer, const FindingLog& findings, CheckpointPolicy policy, fs::path output_dir,
                           RunIdentity identity)
    : trainer_(trainer), findings_(findings), policy_(policy), root_(std::move(output_dir) / "checkpoints"), identity_(std::move(identity)),
      started_(SteadyClock::now()) {}

void Checkpointer::between_steps(int64_t step) {
  bool due = policy_.every_steps > 0 && step % policy_.every_steps == 0;
  // Ranks' clocks differ: a time-based checkpoint is due when it is on any rank.
  if (policy_.every_s > 0)
    due = trainer_.sync().mean_across_ranks(seconds_since(started_) >= policy_.every_s ? 1.0 : 0.0) > 0 || due;
  if (due) save("interval");
}

fs::path Checkpointer::save(const std::string& reason) {
  const auto snap = trainer_.snapshot();
  const fs::path final_dir = root_ / step_dir_name(snap.step);
  if (snap.step == last_saved_step_) return final_dir;
  trainer_.enter_phase(kPhase, snap.step);  // the watchdog and heartbeat.json name it
  const auto start = SteadyClock::now();
  const int rank = trainer_.sync().rank();
  const fs::path tmp = root_ / (".tmp-" + step_dir_name(snap.step));
  if (rank == 0 && fs::exists(root_)) {
    // Left by a write that was killed (a signal's grace ran out, SIGKILL, a full disk).
    for (const auto& entry : fs::directory_iterator(root_)) {
      const auto name = entry.path().filename().string();
      if (name.starts_with(".tmp-")) fs::remove_all(entry.path());
    }
  }
  trainer_.sync().mean_across_ranks(0);  // no rank writes into a directory rank 0 is removing
  fs::create_directories(tmp);

  write_checkpoint_files(trainer_, snap, tmp, rank, /*shared=*/rank == 0, findings_.snapshot(), identity_, reason);
  trainer_.sync().mean_across_ranks(0);  // every rank's file is on disk
  if (rank == 0) {
    nlohmann::json files = nlohmann::json::object();
    for (const auto& entry : fs::directory_iterator(tmp))
      files[entry.path().filename().string()] = sha256_of_file(entry.path().string());
    write_file_synced(tmp / kManifest, {nlohmann::json{{"format", kFormatName}, {"files", files}}.dump(2) + "\n"});
    sync_directory(tmp);
    replace_directory(tmp, final_dir);
    sync_directory(root_);
    const auto kept = checkpoints_in(root_);
    for (size_t i = 0; i + policy_.keep < kept.size(); ++i) fs::remove_all(kept[i]);
    spdlog::info("checkpoint ({}) at step {}: {} ({:.2f} s)", reason, snap.step, final_dir.string(),
                 seconds_since(start));
  }
  last_saved_step_ = snap.step;
  started_ = SteadyClock::now();
  return final_dir;
}

}  // namespace rcl
