#include "rocm_conformance_llm/loop/training_state.hpp"

#include <array>
#include <fstream>
#include <span>

#include <fmt/format.h>

#include "rocm_conformance_llm/base/files.hpp"
#include "rocm_conformance_llm/base/safetensors.hpp"
#include "rocm_conformance_llm/data.hpp"

namespace rcl {
namespace fs = std::filesystem;

namespace {

// ---- Hugging Face names -------------------------------------------------------------------
// The decoder maps onto a Hugging Face architecture when it computes what that one computes:
//   GPT-2 (GPT2LMHeadModel): learned positions, LayerNorm before each branch, GELU;
//   Llama (LlamaForCausalLM): rotary positions in the "rotate half" form, RMSNorm before each
//     branch, SwiGLU (silu(gate) * up); our Linear biases load through Llama's attention_bias
//     and mlp_bias (transformers >= 4.41).
// Neither with Q/K norm, a Q/K/V convolution or mixture-of-experts feed-forwards (Mixtral's
// experts have no biases and no GELU); the LM head is tied to the embedding in both.
enum class Layout { native, gpt2, llama };
constexpr const char* kLayoutNames[] = {"native", "gpt2", "llama"};

Layout layout_of(const TrainingConfig& c) {
  if (c.norm_layout != NormLayout::pre || c.qk_norm || c.qkv_conv_kernel != 0 || c.moe_experts > 0)
    return Layout::native;
  // GPT-2 has no grouped-query attention.
  if (c.position == PositionEncoding::learned && c.norm == NormKind::layernorm && c.activation == Activation::gelu &&
      key_value_heads(c) == c.num_heads)
    return Layout::gpt2;
  if (c.position == PositionEncoding::rotary && c.norm == NormKind::rmsnorm && c.activation == Activation::swiglu)
    return Layout::llama;
  return Layout::native;
}

// Our module path -> the stored names. A fused tensor is stored as row blocks, one name each
// (Llama: Q, K, V of attn.qkv, K and V narrower under grouped-query attention; gate and up of
// SwiGLU's mlp.up, equal halves in that order: the first goes through silu). GPT-2's Conv1D
// stores a Linear weight transposed ([in, out]).
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
  std::vector<int64_t> rows{};     // the blocks' rows (set by stored_names)
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

// Each parameter's names in model.safetensors, with the rows of each block: Q, K, V's widths for
// the three blocks of attn.qkv, equal shares otherwise.
std::vector<std::pair<std::string, StoredNames>> stored_names(GPT& model, Layout layout) {
  const auto& cfg = model->config();
  std::vector<std::pair<std::string, StoredNames>> out;
  for (const auto& item : model->named_parameters()) {
    auto stored = layout == Layout::native ? StoredNames{{item.key()}} : hf_names(item.key(), layout);
    const auto parts = static_cast<int64_t>(stored.names.size());
    if (parts == 3)
      stored.rows = {cfg.hidden_size, key_value_width(cfg), key_value_width(cfg)};
    else
      stored.rows.assign(stored.names.size(), item.value().size(0) / parts);
    out.emplace_back(item.key(), std::move(stored));
  }
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
            {"num_attention_heads", c.num_heads}, {"num_key_value_heads", key_value_heads(c)},
            {"head_dim", c.hidden_size / c.num_heads}, {"hidden_act", "silu"}, {"rms_norm_eps", 1e-5},
            {"rope_theta", 10000.0}, {"attention_bias", true}, {"mlp_bias", true},
            {"attention_dropout", c.dropout}, {"tie_word_embeddings", true}, {"torch_dtype", "float32"}};
  // No Hugging Face architecture has this layout: the same keys' meaning, our own model_type.
  return {{"architectures", {"RclGPT"}}, {"model_type", "rcl-gpt"}, {"vocab_size", c.vocab_size},
          {"max_position_embeddings", c.seq_len}, {"hidden_size", c.hidden_size},
          {"num_hidden_layers", c.num_layers}, {"num_attention_heads", c.num_heads},
          {"num_key_value_heads", key_value_heads(c)}, {"intermediate_size", ffn_hidden_size(c)}, {"hidden_act", c.activation}, {"norm", c.norm},
          {"norm_layout", c.norm_layout}, {"position_embedding", c.position}, {"qk_norm", c.qk_norm},
          {"qkv_conv_kernel", c.qkv_conv_kernel}, {"moe_experts", c.moe_experts}, {"moe_top_k", c.moe_top_k},
          {"tie_word_embeddings", true}, {"torch_dtype", "float32"}};
}

// The data layer's special tokens, so transformers neither warns about nor generates with its
// architecture's defaults (GPT-2's 50256 lies outside a byte vocabulary): the byte tokenizer's
// for a text file, none for the synthetic corpus.
nlohmann::json special_token_ids(const TrainingConfig& c) {
  if (c.data_path.empty()) return {{"bos_token_id", nullptr}, {"eos_token_id", nullptr}, {"pad_token_id", nullptr}};
  return {{"bos_token_id", byte_tokens::bos}, {"eos_token_id", byte_tokens::eos}, {"pad_token_id", byte_tokens::pad}};
}

// Which optimizer file of how many this rank's moments go to: ZeRO's shard, or, a model split
// across ranks, one per rank (the ranks of a tensor-parallel group share a ZeRO shard index).
ShardOf optimizer_files_of(LoopAccess& loop, const LoopAccess::Snapshot& snap) {
  if (loop.model()->parallel().splits_model()) return {loop.rank(), loop.world_size()};
  return snap.optimizer_shard;
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

}  // namespace

std::string rank_state_file(int rank) { return fmt::format("rank-{}.safetensors", rank); }
std::string optimizer_shard_file(int index) { return fmt::format("optimizer-shard-{}.safetensors", index); }

std::string model_shard_file(int rank) { return fmt::format("model-shard-{}.safetensors", rank); }

std::vector<std::string> weight_and_optimizer_files(const nlohmann::json& state) {
  const int model_shards = state.is_object() ? state.value("model_shards", 1) : 1;
  std::vector<std::string> files;
  if (model_shards > 1)
    for (int r = 0; r < model_shards; ++r) files.push_back(model_shard_file(r));
  else
    files = {kWeightsFile, kHfConfigFile};
  for (auto& f : optimizer_files(state)) files.push_back(std::move(f));
  return files;
}

std::vector<std::string> optimizer_files(const nlohmann::json& state) {
  const int shards = state.is_object() ? state.value("optimizer_shards", 1) : 1;
  if (shards <= 1) return {kOptimizerFile};
  std::vector<std::string> files;
  for (int i = 0; i < shards; ++i) files.push_back(optimizer_shard_file(i));
  return files;
}

nlohmann::json read_checkpoint_json(const fs::path& path) {
  std::ifstream in(path);
  if (!in) throw CheckpointError("checkpoint " + path.parent_path().string() + ": missing " + path.filename().string());
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError("checkpoint " + path.parent_path().string() + ": " + path.filename().string() +
                          " is not valid JSON (" + e.what() + ")");
  }
}

void write_training_state(LoopAccess& loop, const LoopAccess::Snapshot& snap, const fs::path& dir, bool shared,
                          const nlohmann::json& run_fields) {
  std::vector<std::pair<std::string, torch::Tensor>> rng{{"rng.cpu", snap.rng.cpu_state}};
  if (snap.rng.device_state.defined()) rng.emplace_back("rng.device", snap.rng.device_state);
  write_safetensors(dir / rank_state_file(loop.rank()), rng);
  const std::vector<std::pair<std::string, torch::Tensor>> moments{{"exp_avg", snap.optimizer.exp_avg},
                                                                   {"exp_avg_sq", snap.optimizer.exp_avg_sq}};
  const ShardOf files = optimizer_files_of(loop, snap);
  const bool sharded = files.count > 1;
  if (sharded) write_safetensors(dir / optimizer_shard_file(files.index), moments);
  // A split model: this rank's shard (what a resume reads), and the whole model gathered from
  // the shards (a collective: every rank) for the export.
  const bool split = loop.model()->parallel().splits_model();
  std::vector<std::pair<std::string, torch::Tensor>> whole;
  if (split) {
    std::vector<std::pair<std::string, torch::Tensor>> mine;
    for (const auto& item : loop.model()->named_parameters()) mine.emplace_back(item.key(), item.value());
    write_safetensors(dir / model_shard_file(loop.rank()), mine, {{"format", "pt"}});
    whole = loop.model()->gather_full_parameters();
  }
  const GatheredParameters full(loop.model()->fsdp());  // FSDP: on every rank; rank 0 writes it
  if (!shared) return;
  const auto& cfg = loop.ctx().cfg;
  const Layout layout = layout_of(cfg);
  std::vector<std::pair<std::string, torch::Tensor>> weights;
  auto params = loop.model()->named_parameters();
  for (const auto& [native, stored] : stored_names(loop.model(), layout)) {
    torch::Tensor value = params[native];
    for (const auto& [name, full] : whole)
      if (name == native) value = full;
    std::vector<int64_t> rows = stored.rows;
    if (split && rows.size() != 3)  // measured on this rank's shard; Q, K, V's are the config's
      rows.assign(rows.size(), value.size(0) / static_cast<int64_t>(rows.size()));
    const auto blocks = value.split_with_sizes(rows, 0);
    for (size_t i = 0; i < blocks.size(); ++i)
      weights.emplace_back(stored.names[i], stored.transpose ? blocks[i].t() : blocks[i]);
  }
  write_safetensors(dir / kWeightsFile, weights, {{"format", "pt"}});
  auto model_config = hf_config(cfg, layout);
  model_config.update(special_token_ids(cfg));
  write_file_synced(dir / kHfConfigFile, {model_config.dump(2) + "\n"});
  if (!sharded) write_safetensors(dir / kOptimizerFile, moments);
  nlohmann::json scaler = nullptr;
  if (snap.scaler) {
    const auto s = snap.scaler->state();
    scaler = {{"scale", s.scale}, {"clean_streak", s.clean_streak}, {"skipped_steps", s.skipped_steps}};
  }
  nlohmann::json state = {{"format", kCheckpointFormat}, {"version", kCheckpointVersion},
                          {"step", snap.step}, {"micro_batches", snap.micro_batches},
                          {"optimizer_steps", snap.optimizer.steps}, {"loss_scaler", scaler},
                          {"weights", kLayoutNames[int(layout)]}, {"optimizer_shards", files.count},
                          {"model_shards", split ? loop.world_size() : 1}};
  state.update(run_fields);
  write_file_synced(dir / kStateFile, {state.dump(2) + "\n"});
}

LoopAccess::Snapshot read_training_state(LoopAccess& loop, const fs::path& dir) {
  const auto state = read_checkpoint_json(dir / kStateFile);
  const auto& cfg = loop.ctx().cfg;
  const bool split = loop.model()->parallel().splits_model();
  const Layout layout = layout_of(cfg);
  if (state.value("weights", "") != kLayoutNames[int(layout)])
    throw CheckpointError("checkpoint " + dir.string() + ": state.json's weights layout does not fit this model");
  const int model_shards = state.value("model_shards", 1);
  if (model_shards != (split ? loop.world_size() : 1))
    throw CheckpointError(fmt::format("checkpoint {}: model weights in {} shards (this run: {})", dir.string(),
                                      model_shards, split ? loop.world_size() : 1));
  torch::NoGradGuard no_grad;
  // Weights: by name, shape and dtype, into the parameters (views of the optimizer's flat buffer;
  // under FSDP gathered, and this rank's shards kept from them).
  const fs::path weights_path = dir / (split ? model_shard_file(loop.rank()) : kWeightsFile);
  const auto weights = read_safetensors(weights_path);
  {
    GatheredParameters full(loop.model()->fsdp());
    const auto names = stored_names(loop.model(), split ? Layout::native : layout);  // a shard: native names
    size_t stored_tensors = 0;
    for (const auto& [native, stored] : names) stored_tensors += stored.names.size();
    if (weights.tensors.size() != stored_tensors)
      throw CheckpointError(fmt::format("checkpoint {}: {} holds {} tensors, this model stores {}", dir.string(),
                                        weights_path.filename().string(), weights.tensors.size(), stored_tensors));
    auto params = loop.model()->named_parameters();
    for (const auto& [native, stored] : names) {
      auto& param = params[native];
      std::vector<torch::Tensor> blocks;
      for (size_t i = 0; i < stored.names.size(); ++i) {
        auto shape = param.sizes().vec();
        shape[0] = stored.rows[i];
        if (stored.transpose) std::swap(shape[0], shape[1]);
        const auto& name = stored.names[i];
        const auto t = require(weights, name, weights_path, param.scalar_type(), shape);
        blocks.push_back(stored.transpose ? t.t() : t);
      }
      param.copy_(torch::cat(blocks, 0));
    }
    full.keep_values();
  }
  // Everything else a step reads, into the loop's own snapshot (the caller restores it).
  auto snap = loop.snapshot();
  const int shards_then = state.value("optimizer_shards", 1);
  const ShardOf files = optimizer_files_of(loop, snap);
  if (shards_then != files.count)
    throw CheckpointError(fmt::format("checkpoint {}: optimizer state in {} shards (this run: {})", dir.string(),
                                      shards_then, files.count));
  const fs::path optimizer_path = dir / optimizer_files(state).at(files.index);
  const auto optimizer = read_safetensors(optimizer_path);
  const std::vector<int64_t> flat{snap.optimizer.exp_avg.numel()};
  snap.optimizer.exp_avg = require(optimizer, "exp_avg", optimizer_path, snap.optimizer.exp_avg.scalar_type(), flat);
  snap.optimizer.exp_avg_sq =
      require(optimizer, "exp_avg_sq", optimizer_path, snap.optimizer.exp_avg_sq.scalar_type(), flat);
  const fs::path rank_path = dir / rank_state_file(loop.rank());
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
  return snap;
}

void load_training_state(LoopAccess& loop, const fs::path& dir) { loop.restore(read_training_state(loop, dir)); }

}  // namespace rcl
