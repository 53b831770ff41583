// The decoder: shapes and counts, causality, float64 gradient checks of every block variant,
// activation checkpointing's exactness, and the diagnostics views (block outputs, GEMM shapes).
#include <set>

#include <gtest/gtest.h>

#include <torch/torch.h>
#include <torch/version.h>

#include "rocm_conformance_llm/checks/detectors/gemm_canary.hpp"
#include "rocm_conformance_llm/checks/detectors/numerics.hpp"
#include "rocm_conformance_llm/model.hpp"
#include "rocm_conformance_llm/workload/hf_names.hpp"
#include "rocm_conformance_llm/workload/op_tap.hpp"
#include "rocm_conformance_llm/workload/precision.hpp"
#include "support/config_error.hpp"
#include "support/resolved_config.hpp"

namespace rcl {
namespace {
namespace RCL_UNITY_ID {

TrainingConfig tiny_config() {
  TrainingConfig cfg;
  cfg.hidden_size = 8;
  cfg.num_heads = 2;
  cfg.num_layers = 2;
  cfg.ffn_multiplier = 2.0;
  cfg.seq_len = 6;
  cfg.vocab_size = 13;
  return testing::on_the_cpu(cfg);
}

torch::Tensor random_tokens(int64_t batch, int64_t seq, int64_t vocab, uint64_t seed) {
  torch::manual_seed(seed);
  return torch::randint(vocab, {batch, seq}, torch::kLong);
}

int64_t numel_of(const std::vector<torch::Tensor>& tensors) {
  int64_t n = 0;
  for (const auto& t : tensors) n += t.numel();
  return n;
}

// --- sizes ---

TEST(Model, SwigluWidthIsTwoThirdsRoundedToMultipleOfEight) {
  TrainingConfig cfg;
  cfg.hidden_size = 768;
  cfg.ffn_multiplier = 4.0;
  cfg.activation = Activation::gelu;
  EXPECT_EQ(ffn_hidden_size(cfg), 3072);
  cfg.activation = Activation::swiglu;
  EXPECT_EQ(ffn_hidden_size(cfg), 2048);  // 2/3 * 3072
  cfg.hidden_size = 100;                  // 2/3 * 400 = 266.7 -> 267 -> 272
  EXPECT_EQ(ffn_hidden_size(cfg), 272);
}

struct Variant {
  const char* norm;
  const char* activation;
  const char* layout;
  bool qk_norm;
  int64_t conv;
  const char* position;
};

std::string variant_name(const ::testing::TestParamInfo<Variant>& info) {
  const auto& v = info.param;
  return std::string(v.norm) + "_" + v.activation + "_" + v.layout + (v.qk_norm ? "_qknorm" : "") +
         (v.conv ? "_conv" : "") + "_" + v.position;
}

std::vector<Variant> all_variants() {
  std::vector<Variant> out;
  for (const char* norm : {"layernorm", "rmsnorm"})
    for (const char* activation : {"gelu", "swiglu"})
      for (const char* layout : {"pre", "sandwich"})
        for (bool qk_norm : {false, true})
          for (int64_t conv : {0, 3})
            for (const char* position : {"learned", "rotary"})
              out.push_back({norm, activation, layout, qk_norm, conv, position});
  return out;
}

// The tiny model with `v`'s knobs.
TrainingConfig variant_config(const Variant& v) {
  auto cfg = tiny_config();
  cfg.norm = *parse_name<NormKind>(v.norm);
  cfg.activation = *parse_name<Activation>(v.activation);
  cfg.norm_layout = *parse_name<NormLayout>(v.layout);
  cfg.qk_norm = v.qk_norm;
  cfg.qkv_conv_kernel = v.conv;
  cfg.position = *parse_name<PositionEncoding>(v.position);
  return cfg;
}

TEST(Model, ParameterCountMatchesTheBuiltModelForEveryKnob) {
  for (const Variant& v : all_variants())
    for (int64_t kv_heads : {0, 1}) {
      auto cfg = variant_config(v);
      cfg.num_key_value_heads = kv_heads;
      GPT model(cfg);
      const auto all = model->parameters();
      EXPECT_EQ(parameter_count(cfg), numel_of(all)) << nlohmann::json(cfg).dump();
      EXPECT_EQ(numel_of(model->decay_parameters()) + numel_of(model->no_decay_parameters()), numel_of(all));
    }
}

// Every block variant's parameters under the names its checkpoint stores (workload/hf_names.hpp):
// each name once, a fused tensor's row blocks covering it, and the blocks put back together
// (transposed back where GPT-2's Conv1D stores them so) are the parameter again. A variant only
// a native checkpoint can hold must not be given a Hugging Face layout.
TEST(HfNames, EveryBlockVariantStoresEachParameterOnceAndRoundTrips) {
  for (const Variant& v : all_variants())
    for (int64_t kv_heads : {0, 1})
      for (int64_t experts : {0, 2}) {
        auto cfg = variant_config(v);
        cfg.num_key_value_heads = kv_heads;
        cfg.moe_experts = experts;
        GPT model(cfg);
        const HfLayout layout = hf_layout_of(cfg);
        if (v.qk_norm || v.conv > 0 || experts > 0 || v.layout != std::string("pre"))
          EXPECT_EQ(layout, HfLayout::native);
        const auto params = model->named_parameters();
        std::set<std::string> names;
        for (const auto& [native, stored] : stored_names(cfg, params, layout)) {
          const torch::Tensor& param = params[native];
          for (const auto& name : stored.names) EXPECT_TRUE(names.insert(name).second) << name;
          std::vector<torch::Tensor> read_back;  // as training_state.cpp writes, then reads them
          for (const auto& block : param.split_with_sizes(stored.rows, 0)) {
            const auto written = stored.transpose ? block.t().contiguous() : block;
            read_back.push_back(stored.transpose ? written.t() : written);
          }
          EXPECT_TRUE(torch::equal(torch::cat(read_back, 0), param)) << native << " " << to_string(layout);
        }
        EXPECT_GE(names.size(), params.size());
      }
}

TEST(Model, FlopsPerTokenFollowsThePalmFormula) {
  TrainingConfig cfg;  // GPT-2 small
  cfg.hidden_size = 768;
  cfg.num_layers = 12;
  cfg.num_heads = 12;
  cfg.seq_len = 1024;
  cfg.vocab_size = 50257;
  const double n = double(parameter_count(cfg) - 1024 * 768);  // learned positions are a lookup
  EXPECT_NEAR(parameter_count(cfg) / 1e6, 124.4, 0.1);         // the published GPT-2 small size
  EXPECT_DOUBLE_EQ(flops_per_token(cfg), 6 * n + 12.0 * 12 * 768 * 1024);
}

// Llama 3.2 1B (the `large` preset's shape): 1.24B parameters with the LM head tied, its
// published size; the 128256-token vocabulary is a fifth of them and of the GEMM FLOPs.
TEST(Model, TheLargePresetHasLlama32OneBsSizeAndVocabulary) {
  const TrainingConfig cfg = find_preset("large").training;
  EXPECT_EQ(cfg.vocab_size, 128256);
  EXPECT_EQ(key_value_heads(cfg), 8);
  EXPECT_EQ(ffn_hidden_size(cfg), 8192);
  EXPECT_EQ(qkv_output_width(cfg), 2048 + 2 * 512);
  const double p = double(parameter_count(cfg));
  EXPECT_NEAR(p / 1e9, 1.236, 0.001) << "Llama 3.2 1B without its biases: 1,235,814,400";
  EXPECT_DOUBLE_EQ(flops_per_token(cfg), 6 * p + 12.0 * 16 * 2048 * 2048);  // rotary: no position table
  TrainingConfig mha = cfg;
  mha.num_key_value_heads = 0;
  EXPECT_EQ(parameter_count(mha) - parameter_count(cfg), 16 * 2 * (2048 - 512) * (2048 + 1));
  EXPECT_EQ(find_preset("small").training.vocab_size, 50257);
}

// --- grouped-query attention ---

// num_key_value_heads == num_heads is multi-head attention as before: the same parameters, drawn
// from the same seed, and bit for bit the same logits and gradients as num_key_value_heads = 0.
TEST(Model, KeyValueHeadsEqualToHeadsIsBitIdenticalToMultiHead) {
  for (const char* position : {"learned", "rotary"}) {
    auto cfg = tiny_config();
    cfg.position = *parse_name<PositionEncoding>(position);
    cfg.qk_norm = true;
    cfg.qkv_conv_kernel = 3;
    auto explicit_heads = cfg;
    explicit_heads.num_key_value_heads = cfg.num_heads;
    torch::manual_seed(8);
    GPT before(cfg);
    torch::manual_seed(8);
    GPT after(explicit_heads);
    const auto tokens = random_tokens(2, cfg.seq_len, cfg.vocab_size, 9);
    const auto a = before->forward(tokens), b = after->forward(tokens);
    ASSERT_TRUE(torch::equal(a, b)) << position;
    a.square().sum().backward();
    b.square().sum().backward();
    const auto pa = before->named_parameters(), pb = after->named_parameters();
    ASSERT_EQ(pa.size(), pb.size());
    for (const auto& item : pa) {
      EXPECT_TRUE(torch::equal(item.value(), pb[item.key()])) << item.key();
      EXPECT_TRUE(torch::equal(item.value().grad(), pb[item.key()].grad())) << item.key();
    }
  }
}

// A GQA model computes what a multi-head model computes whose every K/V head is a copy of the
// GQA head serving it (heads 2j and 2j+1 share KV head j, as Hugging Face's repeat_kv): on the
// explicit path and through SDPA, with rotary positions and Q/K norms.
TEST(Model, GroupedQueryAttentionIsMultiHeadWithKeyValueHeadsRepeated) {
  std::vector<std::string> backends = {"math"};
  if (sdpa_available()) backends.push_back("sdpa");
  for (const auto& backend : backends)
    for (bool qk_norm : {false, true}) {
      auto cfg = tiny_config();
      cfg.hidden_size = 16;
      cfg.num_heads = 4;
      cfg.position = PositionEncoding::rotary;
      cfg.qk_norm = qk_norm;
      cfg.attention_backend = *parse_name<AttentionBackend>(backend);
      auto gqa_cfg = cfg;
      gqa_cfg.num_key_value_heads = 2;
      GPT gqa(gqa_cfg), mha(cfg);
      const int64_t head_dim = 4, c = cfg.hidden_size;
      {
        torch::NoGradGuard no_grad;
        auto mha_params = mha->named_parameters();
        for (const auto& item : gqa->named_parameters()) {
          auto& target = mha_params[item.key()];
          if (item.key().find("attn.qkv.") == std::string::npos) {
            target.copy_(item.value());
            continue;
          }
          // Rows: Q (4 heads), K (2 heads), V (2 heads) -> Q, K and V with each KV head twice.
          const auto parts = item.value().split_with_sizes({c, 2 * head_dim, 2 * head_dim}, 0);
          const auto repeated = [&](const torch::Tensor& t) {
            return t.reshape({2, head_dim, -1}).repeat_interleave(2, 0).reshape({4 * head_dim, -1}).squeeze(-1);
          };
          target.copy_(torch::cat({parts[0], repeated(parts[1]), repeated(parts[2])}, 0));
        }
      }
      EXPECT_EQ(gqa->blocks()[0]->attn->qkv->weight.size(0), c + 2 * 2 * head_dim);
      const auto tokens = random_tokens(2, cfg.seq_len, cfg.vocab_size, 10);
      EXPECT_TRUE(torch::allclose(gqa->forward(tokens), mha->forward(tokens), 1e-5, 1e-6))
          << backend << " qk_norm=" << qk_norm;
    }
}

TEST(Model, RepeatedKeyValueHeadsServeConsecutiveQueryHeads) {
  const auto kv = torch::arange(2, torch::kFloat).view({1, 2, 1, 1}).expand({1, 2, 3, 5});
  const auto out = repeat_key_value_heads(kv, 3);
  ASSERT_EQ(out.sizes(), (std::vector<int64_t>{1, 6, 3, 5}));
  for (int64_t h = 0; h < 6; ++h) EXPECT_EQ(out[0][h][0][0].item<float>(), float(h / 3)) << h;
}

TEST(Model, WeightDecayAppliesToLinearWeightsOnly) {
  auto cfg = tiny_config();
  cfg.qkv_conv_kernel = 3;
  GPT model(cfg);
  for (const auto& p : model->decay_parameters()) EXPECT_EQ(p.dim(), 2);
  // Per block: qkv, proj, up, down; embeddings excluded.
  EXPECT_EQ(model->decay_parameters().size(), size_t(4 * cfg.num_layers));
}

TEST(Model, ResidualProjectionsStartSmallerByOneOverSqrtTwoL) {
  TrainingConfig cfg;
  cfg.hidden_size = 256;
  cfg.num_heads = 4;
  cfg.num_layers = 8;
  cfg.vocab_size = 64;
  cfg = testing::on_the_cpu(cfg);
  torch::manual_seed(0);
  GPT model(cfg);
  auto& block = model->blocks()[0];
  EXPECT_NEAR(block->attn->qkv->weight.std().item<double>(), 0.02, 0.001);
  EXPECT_NEAR(block->attn->proj->weight.std().item<double>(), 0.02 / 4.0, 0.0005);  // sqrt(2*8) = 4
  EXPECT_NEAR(block->mlp->down->weight.std().item<double>(), 0.02 / 4.0, 0.0005);
  // init_std (what the gemm mode lowers as it widens) sets every one of them.
  cfg.init_std = 0.01;
  GPT narrower(cfg);
  EXPECT_NEAR(narrower->named_parameters()["wte.weight"].std().item<double>(), 0.01, 0.0005);
  EXPECT_NEAR(narrower->blocks()[0]->attn->qkv->weight.std().item<double>(), 0.01, 0.0005);
  EXPECT_NEAR(narrower->blocks()[0]->mlp->down->weight.std().item<double>(), 0.01 / 4.0, 0.00025);
}

TEST(Model, UnresolvedVocabIsAConfigError) {
  auto cfg = tiny_config();
  cfg.vocab_size = 0;
  EXPECT_THROW(GPT{cfg}, ConfigError);
}

// --- attention ---

#if TORCH_VERSION_MAJOR < 2
TEST(Model, SdpaBackendsNeedLibtorch2) {
  for (const char* backend : {"sdpa", "sdpa_math", "sdpa_flash", "sdpa_mem_efficient"}) {
    auto cfg = tiny_config();
    cfg.attention_backend = *parse_name<AttentionBackend>(backend);
    const std::string refusal = testing::config_error_of([&] { GPT model(cfg); });
    EXPECT_NE(refusal.find("libtorch >= 2.0"), std::string::npos) << backend << ": '" << refusal << "'";
    EXPECT_NE(refusal.find(backend), std::string::npos) << refusal;
  }
}
#else
TEST(Model, SdpaMatchesTheMathReference) {
  auto cfg = tiny_config();
  torch::manual_seed(3);
  GPT reference(cfg);
  cfg.attention_backend = AttentionBackend::sdpa_math;
  GPT sdpa(cfg);
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < reference->parameters().size(); ++i) sdpa->parameters()[i].copy_(reference->parameters()[i]);
  const auto tokens = random_tokens(2, cfg.seq_len, cfg.vocab_size, 4);
  EXPECT_TRUE(torch::allclose(reference->forward(tokens), sdpa->forward(tokens), 1e-5, 1e-6));
}
#endif

// Changing the last token must leave every earlier position's logits unchanged: no variant
// (rotary, Q/K/V convolution, sandwich norms) may look ahead.
TEST(Model, IsCausalForEveryPositionAndConvKnob) {
  for (const char* position : {"learned", "rotary"})
    for (int64_t conv : {0, 3}) {
      auto cfg = tiny_config();
      cfg.position = *parse_name<PositionEncoding>(position);
      cfg.qkv_conv_kernel = conv;
      cfg.norm_layout = NormLayout::sandwich;
      GPT model(cfg);
      model->eval();
      torch::NoGradGuard no_grad;
      auto tokens = random_tokens(2, cfg.seq_len, cfg.vocab_size, 5);
      auto changed = tokens.clone();
      changed.select(1, cfg.seq_len - 1).add_(1).remainder_(cfg.vocab_size);
      const auto a = model->forward(tokens), b = model->forward(changed);
      const auto prefix = cfg.seq_len - 1;
      EXPECT_TRUE(torch::equal(a.slice(1, 0, prefix), b.slice(1, 0, prefix))) << position << " conv=" << conv;
      EXPECT_FALSE(torch::equal(a.slice(1, prefix), b.slice(1, prefix)));
    }
}

TEST(Model, SelfOnlyAttentionMakesEachPositionBlindToItsPrefix) {
  auto cfg = tiny_config();
  GPT model(cfg, ModelOptions{.attention_self_only = true});
  model->eval();
  torch::NoGradGuard no_grad;
  auto tokens = random_tokens(1, cfg.seq_len, cfg.vocab_size, 6);
  auto changed = tokens.clone();
  changed.select(1, 0).add_(1).remainder_(cfg.vocab_size);
  const auto a = model->forward(tokens), b = model->forward(changed);
  EXPECT_TRUE(torch::equal(a.slice(1, 1), b.slice(1, 1)));
}

// --- gradients ---

class BlockVariantGradient : public ::testing::TestWithParam<Variant> {};

// float64 central differences along a random direction in each parameter tensor, in training
// mode with dropout and stochastic depth on (masks fixed by re-seeding before each forward).
TEST_P(BlockVariantGradient, MatchesFiniteDifferencesInFloat64) {
  auto cfg = variant_config(GetParam());
  cfg.dropout = 0.1;
  cfg.drop_path = 0.2;
  torch::manual_seed(11);
  GPT model(cfg);
  model->to(torch::kDouble);
  {
    // Move every parameter off its initial value (norm weights 1, biases 0, identity conv)
    // so no term of the gradient vanishes by symmetry.
    torch::NoGradGuard no_grad;
    for (auto& p : model->parameters()) p.add_(torch::randn_like(p) * 0.1);
  }
  const auto tokens = random_tokens(2, cfg.seq_len, cfg.vocab_size, 12);
  const auto targets = random_tokens(2, cfg.seq_len, cfg.vocab_size, 13);
  auto loss_fn = [&] {
    torch::manual_seed(99);
    return lm_loss(model->forward(tokens), targets);
  };

  loss_fn().backward();
  const double eps = 1e-6;
  for (const auto& item : model->named_parameters()) {
    auto p = item.value();
    ASSERT_TRUE(p.grad().defined()) << item.key() << " gets no gradient";
    torch::manual_seed(std::hash<std::string>{}(item.key()));
    const auto direction = torch::randn_like(p);
    const double analytic = (p.grad() * direction).sum().item<double>();
    double plus, minus;
    {
      torch::NoGradGuard no_grad;
      p.add_(direction * eps);
      plus = loss_fn().item<double>();
      p.sub_(direction * (2 * eps));
      minus = loss_fn().item<double>();
      p.add_(direction * eps);
    }
    const double numeric = (plus - minus) / (2 * eps);
    EXPECT_NEAR(analytic, numeric, 1e-7 + 1e-5 * std::abs(numeric)) << item.key();
  }
}

INSTANTIATE_TEST_SUITE_P(AllKnobs, BlockVariantGradient, ::testing::ValuesIn(all_variants()), variant_name);

// --- activation checkpointing ---

struct GradientsAndRng {
  std::vector<torch::Tensor> grads;
  torch::Tensor next_random;  // proves the generator ends where it would without recompute
};

enum class Recompute { nothing, whole_blocks, all_but_attention };

// One step's parameter gradients, with dropout on the embeddings, the attention probabilities
// and the residual branches and stochastic depth: every recomputed mask must be the forward's.
GradientsAndRng train_step_gradients(Recompute recompute, AutocastState autocast, TrainingConfig cfg = tiny_config()) {
  cfg.hidden_size = 16;
  cfg.dropout = 0.3;
  cfg.drop_path = 0.3;
  cfg.activation_checkpointing = recompute != Recompute::nothing;
  cfg.checkpoint_keep_attention = recompute == Recompute::all_but_attention;
  torch::manual_seed(21);
  GPT model(cfg);
  const auto tokens = random_tokens(4, cfg.seq_len, cfg.vocab_size, 22);
  torch::manual_seed(23);
  torch::Tensor loss;
  {
    AutocastGuard guard(torch::kCPU, autocast);
    loss = lm_loss(model->forward(tokens), tokens);
  }
  loss.backward();
  GradientsAndRng out;
  for (const auto& p : model->parameters()) out.grads.push_back(p.grad().clone());
  out.next_random = torch::rand({4});
  return out;
}

// Bitwise, in float32 and under bf16 autocast: the recomputation runs the forward's very ops on
// the very inputs under the same generator state, and backward then runs the same ops on the CPU,
// whose kernels are deterministic; the block input's gradient sums the same two contributions
// (residual and norm) whichever part of the block delivers them.
TEST(Checkpointing, WithDropoutGivesTheSameGradientsAsNoCheckpointing) {
  TrainingConfig knobs = tiny_config();  // the attention inputs made several ways
  knobs.qk_norm = true;
  knobs.position = PositionEncoding::rotary;
  knobs.num_key_value_heads = 1;
  knobs.norm_layout = NormLayout::sandwich;
  knobs.qkv_conv_kernel = 3;
  for (const auto& cfg : {tiny_config(), knobs})
    for (const auto& autocast : {AutocastState{false}, AutocastState{true, torch::kBFloat16}}) {
      const auto plain = train_step_gradients(Recompute::nothing, autocast, cfg);
      for (const auto recompute : {Recompute::whole_blocks, Recompute::all_but_attention}) {
        const auto recomputed = train_step_gradients(recompute, autocast, cfg);
        ASSERT_EQ(plain.grads.size(), recomputed.grads.size());
        for (size_t i = 0; i < plain.grads.size(); ++i)
          EXPECT_TRUE(torch::equal(plain.grads[i], recomputed.grads[i]))
              << "parameter " << i << " autocast=" << autocast.enabled << " recompute=" << int(recompute)
              << " qk_norm=" << cfg.qk_norm;
        EXPECT_TRUE(torch::equal(plain.next_random, recomputed.next_random));
      }
    }
}

// Which ops run in one training step, forward and backward (the CPU runs the recomputation on the
// calling thread, where the observer is armed): with attention kept the explicit attention's two
// GEMMs (QK^T, AV) run once per block, as without checkpointing; whole-block recompute runs them
// twice. Every linear but the LM head runs twice under either policy.
TEST(Checkpointing, KeepingAttentionRecomputesEverythingButTheAttentionKernel) {
  struct CountOps : OpObserver {
    int linears = 0, matmuls = 0;
    void observe(const TappedOp& op) override {
      linears += op.kind == TappedOp::Kind::linear;
      matmuls += op.kind == TappedOp::Kind::matmul;
    }
  };
  const auto count = [](Recompute recompute) {
    auto cfg = tiny_config();
    cfg.attention_backend = AttentionBackend::math;  // QK^T and AV as tapped GEMMs
    cfg.dropout = 0.1;
    cfg.activation_checkpointing = recompute != Recompute::nothing;
    cfg.checkpoint_keep_attention = recompute == Recompute::all_but_attention;
    GPT model(cfg);
    CountOps ops;
    const ObservedOps armed(ops);
    lm_loss(model->forward(random_tokens(2, cfg.seq_len, cfg.vocab_size, 3)),
            torch::zeros({2, cfg.seq_len}, torch::kLong))
        .backward();
    return std::pair{ops.linears, ops.matmuls};
  };
  const int layers = int(tiny_config().num_layers);
  const auto [plain_linears, plain_matmuls] = count(Recompute::nothing);
  EXPECT_EQ(plain_matmuls, 2 * layers);
  const int recomputed_linears = 2 * plain_linears - 1;  // all but the LM head
  EXPECT_EQ(count(Recompute::whole_blocks), std::pair(recomputed_linears, 2 * plain_matmuls));
  EXPECT_EQ(count(Recompute::all_but_attention), std::pair(recomputed_linears, plain_matmuls));
}

// Without restoring the generator, the recomputed dropout masks differ and so do the
// gradients: the equality above is not vacuous.
TEST(Checkpointing, DropoutMasksReallyDependOnTheGeneratorState) {
  auto cfg = tiny_config();
  cfg.dropout = 0.3;
  torch::manual_seed(1);
  GPT model(cfg);
  const auto tokens = random_tokens(4, cfg.seq_len, cfg.vocab_size, 2);
  torch::manual_seed(5);
  const auto first = model->forward(tokens);
  const auto second = model->forward(tokens);  // generator has moved on
  EXPECT_FALSE(torch::equal(first, second));
}

// --- diagnostics views ---

TEST(Model, BlockOutputsNameTheFirstNonFiniteBlock) {
  auto cfg = tiny_config();
  cfg.num_layers = 3;
  GPT model(cfg);
  const auto tokens = random_tokens(2, cfg.seq_len, cfg.vocab_size, 7);
  std::vector<torch::Tensor> outputs;
  model->forward(tokens, &outputs);
  ASSERT_EQ(outputs.size(), size_t(cfg.num_layers + 1));
  const auto named = [](const std::vector<torch::Tensor>& tensors) {
    std::vector<NamedTensor> out;
    for (const auto& t : tensors) out.push_back({"", t});
    return out;
  };
  EXPECT_EQ(first_nonfinite(named(outputs)), std::nullopt);

  {
    torch::NoGradGuard no_grad;
    model->blocks()[1]->mlp->down->weight.select(0, 0).fill_(std::numeric_limits<float>::infinity());
  }
  outputs.clear();
  model->forward(tokens, &outputs);
  EXPECT_EQ(first_nonfinite(named(outputs)), 2u);  // 0 = embedding, 2 = block 1
}

// The GEMM canary replays the model's own shapes: they must be the layers' weights.
TEST(Model, CanaryGemmShapesMatchTheLayersWeights) {
  auto cfg = tiny_config();
  cfg.activation = Activation::swiglu;
  cfg.num_key_value_heads = 1;  // grouped-query attention: a narrower Q/K/V projection
  GPT model(cfg);
  const auto shapes = model_gemm_shapes(cfg);
  auto find = [&](const std::string& label) {
    for (const auto& s : shapes)
      if (s.label == label) return s;
    ADD_FAILURE() << "no shape " << label;
    return CanaryShape{};
  };
  auto& block = model->blocks()[0];
  auto check_linear = [&](const std::string& label, const torch::nn::Linear& layer) {
    const auto s = find(label);
    EXPECT_EQ(s.m, cfg.batch_size * cfg.seq_len) << label;
    EXPECT_EQ(s.n, layer->weight.size(0)) << label;
    EXPECT_EQ(s.k, layer->weight.size(1)) << label;
    EXPECT_TRUE(s.transpose_b) << label;  // nn::Linear multiplies by W^T
  };
  check_linear("qkv_proj", block->attn->qkv);
  check_linear("attn_out_proj", block->attn->proj);
  check_linear("ffn_up", block->mlp->up);
  check_linear("ffn_down", block->mlp->down);
  EXPECT_EQ(find("lm_head").n, cfg.vocab_size);
  const auto grad = find("ffn_up_weight_grad");
  EXPECT_EQ(grad.m, block->mlp->up->weight.size(0));
  EXPECT_EQ(grad.k, cfg.batch_size * cfg.seq_len);
}

// --- the forward's fast path: one mask, norms in the compute dtype, the conv without layout trips ---

TEST(Model, TheQkvConvolutionIsTheConv1dOnTheChannelsAndLeavesQkvContiguous) {
  auto cfg = tiny_config();
  cfg.qkv_conv_kernel = 3;
  torch::manual_seed(21);
  CausalSelfAttention attn(cfg, ModelOptions{});
  attn->to(torch::kDouble);
  torch::NoGradGuard no_grad;
  attn->qkv_conv->weight.normal_();  // not the identity it starts as
  const auto x = torch::randn({2, cfg.seq_len, 3 * cfg.hidden_size}, torch::kDouble);
  // The reference: channels first, left-padded by k - 1, the module's Conv1d.
  const auto channels_first =
      torch::nn::functional::pad(x.transpose(1, 2), torch::nn::functional::PadFuncOptions({2, 0}));
  const auto want = attn->qkv_conv(channels_first).transpose(1, 2);
  const auto got = attn->causal_conv(x);
  EXPECT_TRUE(got.is_contiguous());
  EXPECT_TRUE(torch::allclose(got, want, 1e-12, 1e-12));
}

TEST(Model, PaddedBatchesOfAnotherSizeGetTheirOwnMask) {
  auto cfg = tiny_config();
  cfg.attention_pad_fraction = 0.5;
  torch::manual_seed(22);
  GPT model(cfg);
  torch::manual_seed(22);
  GPT fresh(cfg);
  model->eval();
  fresh->eval();
  torch::NoGradGuard no_grad;
  const auto tokens = random_tokens(3, cfg.seq_len, cfg.vocab_size, 23);
  model->forward(random_tokens(2, cfg.seq_len, cfg.vocab_size, 24));  // a mask for two sequences first
  const auto got = model->forward(tokens);
  EXPECT_TRUE(torch::equal(got, fresh->forward(tokens)));
  // The mask is the padded one: in the padded (odd) sequence no later query sees a padded key,
  // in the full one they do.
  const int64_t kept = padded_length(cfg.seq_len, cfg.attention_pad_fraction);
  auto changed = tokens.clone();
  changed.select(1, kept).add_(1).remainder_(cfg.vocab_size);
  const auto again = model->forward(changed);
  EXPECT_TRUE(torch::equal(again[1].slice(0, kept + 1), got[1].slice(0, kept + 1)));
  EXPECT_FALSE(torch::equal(again[0].slice(0, kept + 1), got[0].slice(0, kept + 1)));
}

TEST(Model, NormsComputeInTheInputsDtypeCloseToFloat32) {
  for (const auto kind : {NormKind::layernorm, NormKind::rmsnorm}) {
    torch::manual_seed(25);
    Norm norm(kind, 64);
    {
      torch::NoGradGuard no_grad;
      for (auto& p : norm->parameters()) p.normal_();
    }
    const auto x = torch::randn({4, 7, 64}) * 3 + 1;
    const auto want = norm(x);
    const auto got = [&] {
      const AutocastGuard autocast(torch::kCPU, autocast_for(Precision::bf16));
      return norm(x.to(torch::kBFloat16));
    }();
    EXPECT_EQ(got.scalar_type(), torch::kBFloat16) << name_of(kind);
    // bf16 rounding of the input, the weights and the output: a few bf16 ulps of the output's scale.
    const double err = (got.to(torch::kFloat) - want).abs().max().item<double>();
    EXPECT_LT(err, 4.0 / 128 * want.abs().max().item<double>()) << name_of(kind);
    EXPECT_FALSE(torch::equal(got.to(torch::kFloat), want)) << name_of(kind);  // really computed in bf16
  }
}

// --- the LM head: padded vocabulary, chunked loss ---

TEST(LmHead, PadsTheVocabularyToAMultipleOf64WithZeroRows) {
  EXPECT_EQ(padded_vocab(50257), 50304);
  EXPECT_EQ(padded_vocab(64), 64);
  EXPECT_EQ(padded_vocab(13), 64);
  const auto table = torch::randn({13, 4}).requires_grad_(true);
  const auto padded = padded_head_weight(table);
  ASSERT_EQ(padded.sizes(), (std::vector<int64_t>{64, 4}));
  EXPECT_TRUE(torch::equal(padded.narrow(0, 0, 13), table));
  EXPECT_EQ(padded.narrow(0, 13, 51).abs().sum().item<double>(), 0.0);
  padded.sum().backward();  // the gradient reaches the real rows only: there is no pad parameter
  EXPECT_EQ(table.grad().sizes(), table.sizes());
}

// The whole batch's logits through a plain linear and cross-entropy, `hook` applied to the logits
// of tokens [first, first + count): the reference the chunked loss must equal.
std::vector<torch::Tensor> whole_batch_loss(const torch::Tensor& hidden, const torch::Tensor& table,
                                            const torch::Tensor& targets, int64_t first, int64_t count,
                                            const std::function<torch::Tensor(torch::Tensor)>& hook) {
  const auto h = hidden.detach().clone().requires_grad_(true), w = table.detach().clone().requires_grad_(true);
  auto logits = torch::nn::functional::linear(h, w);
  if (hook) {
    auto parts = logits.split_with_sizes({first, count, logits.size(0) - first - count});
    parts[1] = hook(parts[1]);
    logits = torch::cat(parts);
  }
  const auto loss = lm_loss(logits, targets);
  loss.backward();
  return {loss.detach(), h.grad(), w.grad()};
}

std::vector<torch::Tensor> chunked_loss(const torch::Tensor& hidden, const torch::Tensor& table,
                                        const torch::Tensor& targets, const LogitsHook& hook, int64_t chunk) {
  const auto h = hidden.detach().clone().requires_grad_(true), w = table.detach().clone().requires_grad_(true);
  const auto loss = chunked_lm_loss(h, w, targets, hook, chunk);
  loss.backward();
  return {loss.detach(), h.grad(), w.grad()};
}

void expect_same_loss_and_gradients(const std::vector<torch::Tensor>& got, const std::vector<torch::Tensor>& want) {
  const char* names[] = {"loss", "hidden gradient", "table gradient"};
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(got[i].sizes(), want[i].sizes()) << names[i];
    EXPECT_TRUE(torch::allclose(got[i], want[i], 1e-12, 1e-12)) << names[i];
  }
}

TEST(LmHead, ChunkedLossHasTheWholeBatchLossAndGradients) {
  torch::manual_seed(11);
  const auto hidden = torch::randn({37, 8}, torch::kDouble), table = torch::randn({13, 8}, torch::kDouble);
  const auto targets = torch::randint(13, {37}, torch::kLong);
  const auto want = whole_batch_loss(hidden, table, targets, 0, 0, {});
  for (const int64_t chunk : {5, 37, 64}) {  // a partial last chunk, one chunk, a chunk past the end
    SCOPED_TRACE(chunk);
    expect_same_loss_and_gradients(chunked_loss(hidden, table, targets, {}, chunk), want);
  }
  // Without gradients (evaluation) the same loss, and no graph.
  const torch::NoGradGuard no_grad;
  const auto eval = chunked_lm_loss(hidden, table, targets, {}, 5);
  EXPECT_FALSE(eval.requires_grad());
  EXPECT_TRUE(torch::allclose(eval, want[0], 1e-12, 1e-12));
}

TEST(LmHead, AHookThatChangesOneChunksLogitsReachesItsLossAndGradients) {
  torch::manual_seed(12);
  const auto hidden = torch::randn({17, 8}, torch::kDouble), table = torch::randn({13, 8}, torch::kDouble);
  const auto targets = torch::randint(13, {17}, torch::kLong);
  // Chunks of 5: the hook triples the second chunk's logits (tokens 5..9), the fault hooks' kind of change.
  int calls = 0;
  std::vector<int64_t> widths;
  const LogitsHook hook = [&](torch::Tensor logits) {
    widths.push_back(logits.size(1));
    return ++calls == 2 ? logits * 3.0 : logits;
  };
  const auto got = chunked_loss(hidden, table, targets, hook, 5);
  EXPECT_EQ(calls, 4);                             // once per chunk, in the forward only
  EXPECT_EQ(widths, std::vector<int64_t>(4, 64));  // the padded vocabulary's logits
  const auto want = whole_batch_loss(hidden, table, targets, 5, 5, [](torch::Tensor l) { return l * 3.0; });
  expect_same_loss_and_gradients(got, want);
  EXPECT_FALSE(torch::allclose(got[0], whole_batch_loss(hidden, table, targets, 0, 0, {})[0]));
}

TEST(LmHead, TheModelsLossIsTheCrossEntropyOfItsLogits) {
  auto cfg = tiny_config();
  torch::manual_seed(13);
  GPT model(cfg);
  model->to(torch::kDouble);
  const auto tokens = random_tokens(3, cfg.seq_len, cfg.vocab_size, 14);
  const auto targets = random_tokens(3, cfg.seq_len, cfg.vocab_size, 15);
  const auto logits = model->forward(tokens);
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{3, cfg.seq_len, cfg.vocab_size}));  // pad columns cut off
  const auto want = lm_loss(logits, targets);
  want.backward();
  std::vector<torch::Tensor> want_grads;
  for (auto& p : model->parameters()) {
    want_grads.push_back(p.grad().clone());
    p.mutable_grad() = torch::Tensor();
  }
  const auto got = model->loss(tokens, targets);
  got.backward();
  EXPECT_TRUE(torch::allclose(got, want, 1e-12, 1e-12));
  const auto params = model->parameters();
  for (size_t i = 0; i < params.size(); ++i)
    EXPECT_TRUE(torch::allclose(params[i].grad(), want_grads[i], 1e-10, 1e-12)) << i;
}

}  // namespace RCL_UNITY_ID
}  // namespace
}  // namespace rcl
