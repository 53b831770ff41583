#include "rocm_conformance_llm/workload/hf_names.hpp"

#include <array>
#include <fstream>
#include <iterator>
#include <optional>
#include <span>
#include <stdexcept>
#include <string_view>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "rocm_conformance_llm/base/files.hpp"
#include "rocm_conformance_llm/base/sha256.hpp"
#include "rocm_conformance_llm/data.hpp"
#include "rocm_conformance_llm/workload/indexed_dataset.hpp"
#include "rocm_conformance_llm/workload/model_widths.hpp"

namespace rcl {
namespace {

// Our module path -> the stored names, a fused tensor's row blocks one name each.
struct NameRule {
  const char* native;
  std::array<const char*, 3> stored;  // the row blocks' names; nullptr-terminated
  bool transpose;
};
constexpr NameRule kGpt2Top[] = {{"wte.", {"transformer.wte."}, false},
                                 {"wpe.", {"transformer.wpe."}, false},
                                 {"final_norm.", {"transformer.ln_f."}, false}};
constexpr NameRule kGpt2Block[] = {{"norm_attn.", {"ln_1."}, false},       {"attn.qkv.", {"attn.c_attn."}, true},
                                   {"attn.proj.", {"attn.c_proj."}, true}, {"norm_mlp.", {"ln_2."}, false},
                                   {"mlp.up.", {"mlp.c_fc."}, true},       {"mlp.down.", {"mlp.c_proj."}, true}};
constexpr NameRule kLlamaTop[] = {{"wte.", {"model.embed_tokens."}, false}, {"final_norm.", {"model.norm."}, false}};
constexpr NameRule kLlamaBlock[] = {
    {"norm_attn.", {"input_layernorm."}, false},
    {"attn.qkv.", {"self_attn.q_proj.", "self_attn.k_proj.", "self_attn.v_proj."}, false},
    {"attn.proj.", {"self_attn.o_proj."}, false},
    {"norm_mlp.", {"post_attention_layernorm."}, false},
    {"mlp.up.", {"mlp.gate_proj.", "mlp.up_proj."}, false},
    {"mlp.down.", {"mlp.down_proj."}, false}};

std::optional<StoredNames> apply_rules(std::string_view name, std::span<const NameRule> rules,
                                       const std::string& prefix) {
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

StoredNames hf_names(const std::string& native, HfLayout layout) {
  const bool gpt2 = layout == HfLayout::gpt2;
  std::optional<StoredNames> mapped;
  if (native.starts_with("block")) {
    const auto dot = native.find('.');
    const std::string index = native.substr(5, dot - 5);
    const std::span<const NameRule> rules = gpt2 ? std::span<const NameRule>(kGpt2Block) : kLlamaBlock;
    mapped = apply_rules(std::string_view(native).substr(dot + 1), rules,
                         (gpt2 ? "transformer.h." : "model.layers.") + index + ".");
  } else {
    mapped = apply_rules(native, gpt2 ? std::span<const NameRule>(kGpt2Top) : kLlamaTop, "");
  }
  if (!mapped) throw std::logic_error(fmt::format("no {} name for parameter {}", to_string(layout), native));
  return *mapped;
}

// A blend's parts share one tokenizer (open_data refuses others): the first part names it.
std::string first_data_path(const std::string& data_path) { return data_parts(data_path).front().path; }

// The sidecar of the data when it is an indexed dataset that has one.
std::optional<IndexedSidecar> data_sidecar(const TrainingConfig& c) {
  if (c.data_path.empty()) return std::nullopt;
  const std::string path = first_data_path(c.data_path);
  return is_indexed_dataset(path) ? indexed_dataset_sidecar(path) : std::nullopt;
}

std::optional<std::string> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::string bytes{std::istreambuf_iterator<char>(in), {}};
  if (in.bad()) return std::nullopt;
  return bytes;
}

// The text of token `id` in a tokenizer.json: an added token's content, else the model's
// vocabulary entry ({token: id} for BPE and WordPiece, [[piece, score], ...] for Unigram).
std::optional<std::string> token_text(const nlohmann::json& tokenizer, int64_t id) {
  if (const auto added = tokenizer.find("added_tokens"); added != tokenizer.end() && added->is_array())
    for (const auto& token : *added)
      if (token.is_object() && token.value("id", nlohmann::json()) == id &&
          token.value("content", nlohmann::json()).is_string())
        return token["content"].get<std::string>();
  const auto model = tokenizer.find("model");
  if (model == tokenizer.end() || !model->is_object() || !model->contains("vocab")) return std::nullopt;
  const auto& vocab = (*model)["vocab"];
  if (vocab.is_object())
    for (const auto& [text, value] : vocab.items())
      if (value == id) return text;
  if (vocab.is_array() && id >= 0 && id < int64_t(vocab.size()) && vocab[id].is_array() && !vocab[id].empty() &&
      vocab[id][0].is_string())
    return vocab[id][0].get<std::string>();
  return std::nullopt;
}

// What transformers needs to load tokenizer.json on its own: its class and the special tokens'
// texts (it finds no ids in a bare tokenizer.json).
nlohmann::json minimal_tokenizer_config(const std::string& tokenizer_bytes, const nlohmann::json& special_ids) {
  nlohmann::json config = {{"tokenizer_class", "PreTrainedTokenizerFast"}};
  const auto tokenizer = nlohmann::json::parse(tokenizer_bytes, nullptr, /*allow_exceptions=*/false);
  if (!tokenizer.is_object()) return config;
  for (const auto& [key, id] : special_ids.items())
    if (id.is_number_integer())
      if (const auto text = token_text(tokenizer, id.get<int64_t>())) config[key + "_token"] = *text;
  return config;
}

}  // namespace

const char* to_string(HfLayout layout) {
  constexpr const char* kNames[] = {"native", "gpt2", "llama"};
  return kNames[int(layout)];
}

HfLayout hf_layout_of(const TrainingConfig& c) {
  if (c.norm_layout != NormLayout::pre || c.qk_norm || c.qkv_conv_kernel != 0 || c.moe_experts > 0)
    return HfLayout::native;
  // GPT-2 has no grouped-query attention.
  if (c.position == PositionEncoding::learned && c.norm == NormKind::layernorm && c.activation == Activation::gelu &&
      key_value_heads(c) == c.num_heads)
    return HfLayout::gpt2;
  if (c.position == PositionEncoding::rotary && c.norm == NormKind::rmsnorm && c.activation == Activation::swiglu)
    return HfLayout::llama;
  return HfLayout::native;
}

std::vector<std::pair<std::string, StoredNames>> stored_names(const TrainingConfig& cfg, const NamedParameters& params,
                                                              HfLayout layout) {
  std::vector<std::pair<std::string, StoredNames>> out;
  for (const auto& item : params) {
    auto stored = layout == HfLayout::native ? StoredNames{{item.key()}} : hf_names(item.key(), layout);
    const auto parts = static_cast<int64_t>(stored.names.size());
    if (parts == 3) stored.rows = {cfg.hidden_size, key_value_width(cfg), key_value_width(cfg)};
    else stored.rows.assign(stored.names.size(), item.value().size(0) / parts);
    out.emplace_back(item.key(), std::move(stored));
  }
  return out;
}

nlohmann::json hf_config(const TrainingConfig& c, HfLayout layout) {
  if (layout == HfLayout::gpt2)
    return {{"architectures", {"GPT2LMHeadModel"}},
            {"model_type", "gpt2"},
            {"vocab_size", c.vocab_size},
            {"n_positions", c.seq_len},
            {"n_embd", c.hidden_size},
            {"n_layer", c.num_layers},
            {"n_head", c.num_heads},
            {"n_inner", ffn_hidden_size(c)},
            {"activation_function", "gelu"},
            {"layer_norm_epsilon", 1e-5},
            {"resid_pdrop", c.dropout},
            {"embd_pdrop", c.dropout},
            {"attn_pdrop", c.dropout},
            {"tie_word_embeddings", true},
            {"torch_dtype", "float32"}};
  if (layout == HfLayout::llama)
    return {{"architectures", {"LlamaForCausalLM"}},
            {"model_type", "llama"},
            {"vocab_size", c.vocab_size},
            {"max_position_embeddings", c.seq_len},
            {"hidden_size", c.hidden_size},
            {"intermediate_size", ffn_hidden_size(c)},
            {"num_hidden_layers", c.num_layers},
            {"num_attention_heads", c.num_heads},
            {"num_key_value_heads", key_value_heads(c)},
            {"head_dim", c.hidden_size / c.num_heads},
            {"hidden_act", "silu"},
            {"rms_norm_eps", 1e-5},
            {"rope_theta", 10000.0},
            {"attention_bias", true},
            {"mlp_bias", true},
            {"attention_dropout", c.dropout},
            {"tie_word_embeddings", true},
            {"torch_dtype", "float32"}};
  // No Hugging Face architecture has this layout: the same keys' meaning, our own model_type.
  return {{"architectures", {"RclGPT"}},
          {"model_type", "rcl-gpt"},
          {"vocab_size", c.vocab_size},
          {"max_position_embeddings", c.seq_len},
          {"hidden_size", c.hidden_size},
          {"num_hidden_layers", c.num_layers},
          {"num_attention_heads", c.num_heads},
          {"num_key_value_heads", key_value_heads(c)},
          {"intermediate_size", ffn_hidden_size(c)},
          {"hidden_act", c.activation},
          {"norm", c.norm},
          {"norm_layout", c.norm_layout},
          {"position_embedding", c.position},
          {"qk_norm", c.qk_norm},
          {"qkv_conv_kernel", c.qkv_conv_kernel},
          {"moe_experts", c.moe_experts},
          {"moe_top_k", c.moe_top_k},
          {"tie_word_embeddings", true},
          {"torch_dtype", "float32"}};
}

nlohmann::json special_token_ids(const TrainingConfig& c) {
  nlohmann::json ids = {{"bos_token_id", nullptr}, {"eos_token_id", nullptr}, {"pad_token_id", nullptr}};
  if (c.data_path.empty()) return ids;
  if (!is_indexed_dataset(first_data_path(c.data_path)))
    return {{"bos_token_id", byte_tokens::bos}, {"eos_token_id", byte_tokens::eos}, {"pad_token_id", byte_tokens::pad}};
  // The shards' ids are their tokenizer's: the sidecar's names, where there is one.
  if (const auto sidecar = data_sidecar(c))
    for (const char* key : {"bos", "eos", "pad"})
      if (const auto it = sidecar->special_ids.find(key); it != sidecar->special_ids.end() && it->is_number_integer())
        ids[std::string(key) + "_token_id"] = *it;
  return ids;
}

HfTokenizer read_hf_tokenizer(const TrainingConfig& c) {
  HfTokenizer tokenizer;
  tokenizer.special_ids = special_token_ids(c);
  const auto sidecar = data_sidecar(c);
  if (!sidecar || sidecar->tokenizer_path.empty()) return tokenizer;
  const std::string& source = sidecar->tokenizer_path;
  tokenizer.record = {{"source", source}, {"sha256", sidecar->tokenizer_sha256}};
  // Hashed and kept from the same bytes: what is written is what was checked.
  std::optional<std::string> bytes;
  std::string why;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(source, ec)) {
    why = "no such file";
  } else if (!(bytes = read_bytes(source))) {
    why = "it cannot be read";
  } else {
    Sha256 hash;
    hash.update(*bytes);
    if (const auto digest = hash.hex_digest(); digest != sidecar->tokenizer_sha256)
      why = fmt::format("its SHA-256 is {}, not the {} the data was tokenized with", digest, sidecar->tokenizer_sha256);
  }
  if (!why.empty()) {
    tokenizer.record.update({{"copied", false}, {"why", why}});
    return tokenizer;
  }
  const auto config = read_bytes((std::filesystem::path(source).parent_path() / kHfTokenizerConfigFile).string());
  tokenizer.tokenizer_config = config ? *config : minimal_tokenizer_config(*bytes, sidecar->special_ids).dump(2) + "\n";
  tokenizer.tokenizer_json = std::move(*bytes);
  tokenizer.record.update({{"copied", true}, {"tokenizer_config", config ? "copied" : "written"}});
  return tokenizer;
}

nlohmann::json export_tokenizer(const HfTokenizer& tokenizer, const std::filesystem::path& dir) {
  const auto& record = tokenizer.record;
  if (record.is_null()) return record;
  if (!record.at("copied").get<bool>()) {
    spdlog::warn("the Hugging Face export in {} carries no {}: the data's tokenizer '{}': {}", dir.string(),
                 kHfTokenizerFile, record.at("source").get<std::string>(), record.at("why").get<std::string>());
    return record;
  }
  write_file_synced(dir / kHfTokenizerFile, {tokenizer.tokenizer_json});
  write_file_synced(dir / kHfTokenizerConfigFile, {tokenizer.tokenizer_config});
  return record;
}

}  // namespace rcl
