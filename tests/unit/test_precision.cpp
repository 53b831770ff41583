// Mixed precision: the autocast guard's region and restore semantics, and the fp16 dynamic
// loss scaler (CPU cannot run fp16 matmuls, so the scaler is proven on its own tensors,
// including a real fp16 gradient overflow it must back off from and recover).
#include <gtest/gtest.h>

#include <ATen/Context.h>
#include <ATen/record_function.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "rocm_conformance_llm/base/errors.hpp"
#include "rocm_conformance_llm/config.hpp"
#include "rocm_conformance_llm/platform/device.hpp"
#include "rocm_conformance_llm/workload/batched_matmul.hpp"
#include "rocm_conformance_llm/workload/precision.hpp"

namespace rcl {
namespace {
namespace RCL_UNITY_ID {

TEST(Autocast, MixedPrecisionNamesMapToStates) {
  EXPECT_FALSE(autocast_for(Precision::fp32).enabled);
  EXPECT_TRUE(autocast_for(Precision::bf16).enabled);
  EXPECT_EQ(autocast_for(Precision::bf16).dtype, torch::kBFloat16);
  EXPECT_EQ(autocast_for(Precision::fp16).dtype, torch::kHalf);
}

TEST(Autocast, GuardCastsMatmulsInsideAndRestoresOnExit) {
  const auto a = torch::randn({4, 4}), b = torch::randn({4, 4});
  ASSERT_FALSE(current_autocast(torch::kCPU).enabled);
  {
    AutocastGuard outer(torch::kCPU, autocast_for(Precision::bf16));
    EXPECT_EQ(torch::mm(a, b).scalar_type(), torch::kBFloat16);
    {
      AutocastGuard inner(torch::kCPU, autocast_for(Precision::fp32));  // a region that opts out
      EXPECT_EQ(torch::mm(a, b).scalar_type(), torch::kFloat);
    }
    EXPECT_EQ(torch::mm(a, b).scalar_type(), torch::kBFloat16);
    EXPECT_TRUE(current_autocast(torch::kCPU).enabled);
  }
  EXPECT_FALSE(current_autocast(torch::kCPU).enabled);
  EXPECT_EQ(torch::mm(a, b).scalar_type(), torch::kFloat);
}

TEST(Autocast, BackwardOutsideTheRegionGivesFloat32Gradients) {
  auto w = torch::randn({8, 8}, torch::requires_grad());
  const auto x = torch::randn({2, 8});
  torch::Tensor loss;
  {
    AutocastGuard guard(torch::kCPU, autocast_for(Precision::bf16));
    loss = torch::mm(x, w).to(torch::kFloat).pow(2).mean();
  }
  loss.backward();
  EXPECT_EQ(w.grad().scalar_type(), torch::kFloat);  // parameters stay float32
  EXPECT_TRUE(torch::isfinite(w.grad()).all().item<bool>());
}

// The float32 path of a bf16 GEMM: its operands rounded to bf16, products summed in float32, the
// result rounded to bf16, as a native kernel does; only the summation order may differ (one bf16
// ulp on some elements). Gradients too, in their own dtypes.
TEST(ReducedGemm, TheFloat32PathIsTheNativeKernelsArithmetic) {
  torch::manual_seed(11);
  const auto x = torch::randn({3, 7, 48}), w = torch::randn({24, 48}), b = torch::randn({24});
  const auto q = torch::randn({2, 3, 16, 8}).to(torch::kBFloat16), k = torch::randn({2, 3, 16, 8}).to(torch::kBFloat16);
  const auto image = torch::randn({2, 6, 1, 10}).to(torch::kBFloat16), filter = torch::randn({6, 1, 1, 3});
  auto run = [&](bool in_float32) {
    const ReducedGemmInFloat32 path(torch::kBFloat16, in_float32);
    const auto xi = x.clone().requires_grad_(true), wi = w.clone().requires_grad_(true);
    const auto bi = b.clone().requires_grad_(true), qi = q.clone().requires_grad_(true);
    const auto fi = filter.clone().requires_grad_(true);
    torch::Tensor y, s, m, c;
    {
      AutocastGuard autocast(torch::kCPU, autocast_for(Precision::bf16));
      y = gemm_linear(xi, wi, bi);
      s = gemm_matmul(qi, k.transpose(-2, -1));
      m = gemm_mm(y.reshape({-1, 24}), wi);
      c = gemm_depthwise_conv2d(image, fi);
    }
    (y.to(torch::kFloat).square().sum() + s.to(torch::kFloat).square().sum() + m.to(torch::kFloat).sum() +
     c.to(torch::kFloat).square().sum())
        .backward();
    return std::vector<torch::Tensor>{y, s, m, c, xi.grad(), wi.grad(), bi.grad(), qi.grad(), fi.grad()};
  };
  const auto native = run(false), emulated = run(true);
  for (size_t i = 0; i < native.size(); ++i) {
    EXPECT_EQ(native[i].scalar_type(), emulated[i].scalar_type()) << i;
    const auto reference = native[i].to(torch::kDouble);
    EXPECT_LE((emulated[i].to(torch::kDouble) - reference).norm().item<double>(),
              (1.0 / 128) * reference.norm().item<double>())
        << "output/grad " << i;
  }
  EXPECT_EQ(native[0].scalar_type(), torch::kBFloat16);
  // Exactly a float32 GEMM of the rounded operands, rounded once.
  const auto rounded = [](const torch::Tensor& t) { return t.to(torch::kBFloat16).to(torch::kFloat); };
  EXPECT_TRUE(torch::equal(emulated[0],
                           torch::nn::functional::linear(rounded(x), rounded(w), rounded(b)).to(torch::kBFloat16)));
  // Off again after the scope: float32 GEMMs are never touched.
  EXPECT_FALSE(reduced_gemm_in_float32(torch::kBFloat16));
  EXPECT_FALSE(reduced_gemm_in_float32(torch::kFloat));
}

TEST(ReducedGemm, TheChoiceFollowsTheCpuItsLibtorchAndTheOverride) {
  const torch::Device cpu(torch::kCPU);
  const std::vector<std::string> avx2 = {"sse4_2", "avx", "avx2", "fma"};
  std::vector<std::string> avx512 = avx2;
  avx512.insert(avx512.end(), {"avx512f", "avx512bw", "avx512vl", "avx512dq"});
  const CpuGemmFacts avx2_cpu{.flags = avx2, .torch_major = 1, .onednn = true};
  const CpuGemmFacts avx512_cpu{.flags = avx512, .torch_major = 1, .onednn = true};
  EXPECT_TRUE(choose_reduced_gemm(cpu, torch::kBFloat16, avx2_cpu).in_float32);
  EXPECT_FALSE(choose_reduced_gemm(cpu, torch::kBFloat16, avx512_cpu).in_float32);
  EXPECT_NE(choose_reduced_gemm(cpu, torch::kBFloat16, avx2_cpu).why.find("no AVX512BW+VL+DQ"), std::string::npos);
  // Without oneDNN (or with it switched off) libtorch loops whatever the CPU.
  EXPECT_TRUE(choose_reduced_gemm(cpu, torch::kBFloat16, CpuGemmFacts{.flags = avx512, .torch_major = 1}).in_float32);
  // 2.x's check asks oneDNN's ISA, which ONEDNN_MAX_CPU_ISA can cap; 1.13's asks the CPU.
  auto capped = avx512_cpu;
  capped.onednn_max_cpu_isa = "AVX2";
  EXPECT_FALSE(choose_reduced_gemm(cpu, torch::kBFloat16, capped).in_float32);
  capped.torch_major = 2;
  EXPECT_TRUE(choose_reduced_gemm(cpu, torch::kBFloat16, capped).in_float32);
  // fp16: native only with an fp16 ISA on 2.x; 1.13 has no CPU fp16 GEMM at all (left as it is).
  EXPECT_FALSE(choose_reduced_gemm(cpu, torch::kHalf, avx2_cpu).in_float32);
  EXPECT_TRUE(choose_reduced_gemm(cpu, torch::kHalf, CpuGemmFacts{.flags = avx512, .torch_major = 2, .onednn = true})
                  .in_float32);
  // A GPU, a float32 run: nothing to replace. The override wins anywhere; a typo is refused.
  EXPECT_FALSE(choose_reduced_gemm(torch::Device(torch::kCUDA, 0), torch::kBFloat16, avx2_cpu).in_float32);
  EXPECT_FALSE(choose_reduced_gemm(cpu, torch::kFloat, avx2_cpu).in_float32);
  auto forced = avx512_cpu;
  forced.requested = "float32";
  EXPECT_TRUE(choose_reduced_gemm(cpu, torch::kBFloat16, forced).in_float32);
  auto loops = avx2_cpu;
  loops.requested = "native";
  EXPECT_FALSE(choose_reduced_gemm(cpu, torch::kBFloat16, loops).in_float32);
  forced.requested = "fast";
  EXPECT_THROW(choose_reduced_gemm(cpu, torch::kBFloat16, forced), ConfigError);
  const auto path = choose_reduced_gemm(cpu, torch::kBFloat16, avx2_cpu);
  EXPECT_EQ(path.to_json().at("path"), "float32");
  EXPECT_NE(path.describe().find("bf16 GEMMs: computed in float32"), std::string::npos);
}

TEST(ReducedGemm, InstructionSetsAreReadFromCpuinfo) {
  const std::string file = ::testing::TempDir() + "/cpuinfo";
  std::ofstream(file)
      << "processor\t: 0\nflags\t\t: fpu sse avx avx2 avx512f avx512bw avx512vl avx512dq avx512_bf16 amx_bf16\n";
  EXPECT_EQ(cpu_instruction_sets(file), (std::vector<std::string>{"AVX2", "AVX512", "AVX512-BF16", "AMX"}));
  std::ofstream(file) << "flags\t\t: fpu sse avx avx2\n";
  EXPECT_EQ(cpu_instruction_sets(file), (std::vector<std::string>{"AVX2"}));
  EXPECT_TRUE(cpu_instruction_sets(file + ".missing").empty());
}

// The attention's products item by item on libtorch's threads: the same bits as torch::matmul,
// forward and backward, through a transposed view (Kᵀ) as the attention passes it; one aten::mm
// per item, spread over two threads. Taken where libtorch's CPU bmm would run them serially.
struct SeenOps {
  std::mutex mutex;
  std::map<std::string, int> counts;
  std::set<std::thread::id> mm_threads;
};
SeenOps g_seen_ops;

std::unique_ptr<at::ObserverContext> see_op(const at::RecordFunction& fn) {
  std::lock_guard<std::mutex> lock(g_seen_ops.mutex);
  ++g_seen_ops.counts[fn.name()];
  if (std::string(fn.name()) == "aten::mm") g_seen_ops.mm_threads.insert(std::this_thread::get_id());
  return nullptr;
}

TEST(BatchedMatmul, ItemsInParallelGiveMatmulsBitsForwardAndBackward) {
  torch::manual_seed(5);
  const auto q = torch::randn({2, 3, 16, 8}), k = torch::randn({2, 3, 16, 8}), v = torch::randn({2, 3, 16, 8});
  using Product = torch::Tensor (*)(const torch::Tensor&, const torch::Tensor&);
  auto run = [&](Product product) {
    const auto qi = q.clone().requires_grad_(true), ki = k.clone().requires_grad_(true);
    const auto vi = v.clone().requires_grad_(true);
    const auto scores = product(qi, ki.transpose(-2, -1));
    const auto out = product(scores.softmax(-1), vi);
    out.square().sum().backward();
    return std::vector<torch::Tensor>{scores, out, qi.grad(), ki.grad(), vi.grad()};
  };
  const auto reference = run([](const torch::Tensor& a, const torch::Tensor& b) { return torch::matmul(a, b); });
  const int threads_before = torch::get_num_threads();
  torch::set_num_threads(2);
  const auto handle = at::addGlobalCallback(at::RecordFunctionCallback(&see_op).scopes({at::RecordScope::FUNCTION}));
  const auto parallel = run(matmul_items_in_parallel);
  at::removeCallback(handle);
  torch::set_num_threads(threads_before);
  for (size_t i = 0; i < reference.size(); ++i) EXPECT_TRUE(torch::equal(parallel[i], reference[i])) << i;
  EXPECT_EQ(g_seen_ops.counts["aten::bmm"], 0);
  EXPECT_EQ(g_seen_ops.counts["aten::mm"], 6 * 6);  // 2 x 3 items in each of 2 products and 4 backward ones
  EXPECT_EQ(g_seen_ops.mm_threads.size(), 2u);

  // The choice: float32/float64 CPU operands, batch dims alike, autocast off, no MKL behind bmm.
  const auto kt = k.transpose(-2, -1);
  EXPECT_EQ(batched_matmul_runs_items_in_parallel(q, kt), !at::hasMKL());
  EXPECT_FALSE(batched_matmul_runs_items_in_parallel(q.to(torch::kBFloat16), kt.to(torch::kBFloat16)));
  EXPECT_FALSE(batched_matmul_runs_items_in_parallel(q, kt[0]));           // broadcast batch
  EXPECT_FALSE(batched_matmul_runs_items_in_parallel(q[0][0], kt[0][0]));  // 2-D
  AutocastGuard autocast(torch::kCPU, autocast_for(Precision::bf16));
  EXPECT_FALSE(batched_matmul_runs_items_in_parallel(q, kt));
  EXPECT_EQ(batched_matmul(q, kt).scalar_type(), torch::kBFloat16);
}

TEST(LossScaler, ScalesLossAndUnscalesGradients) {
  DynamicLossScaler scaler(1024.0, 100);
  auto w = torch::ones({3}, torch::requires_grad());
  scaler.scale((w * torch::tensor({1.0f, 2.0f, 3.0f})).sum()).backward();
  EXPECT_TRUE(torch::equal(w.grad(), torch::tensor({1024.0f, 2048.0f, 3072.0f})));
  EXPECT_FALSE(scaler.unscale_and_check(w.grad()));
  EXPECT_TRUE(torch::equal(w.grad(), torch::tensor({1.0f, 2.0f, 3.0f})));
}

TEST(LossScaler, DetectsInfAndNanInAnyElement) {
  DynamicLossScaler scaler(1.0, 100);
  EXPECT_FALSE(scaler.unscale_and_check(torch::ones({5})));
  EXPECT_TRUE(scaler.unscale_and_check(torch::tensor({0.0f, 1.0f, std::numeric_limits<float>::quiet_NaN()})));
  EXPECT_TRUE(scaler.unscale_and_check(torch::tensor({-std::numeric_limits<float>::infinity(), 0.0f})));
}

TEST(LossScaler, BacksOffOnOverflowAndGrowsAfterTheInterval) {
  DynamicLossScaler scaler(1024.0, 3);
  scaler.update(true, 1);
  EXPECT_EQ(scaler.current_scale(), 512.0);
  EXPECT_EQ(scaler.skipped_steps(), 1);
  scaler.update(false, 2);
  scaler.update(false, 3);
  EXPECT_EQ(scaler.current_scale(), 512.0);
  scaler.update(true, 4);  // an overflow resets the clean streak
  EXPECT_EQ(scaler.current_scale(), 256.0);
  for (int64_t step = 5; step <= 7; ++step) scaler.update(false, step);
  EXPECT_EQ(scaler.current_scale(), 512.0);
  EXPECT_EQ(scaler.skipped_steps(), 2);
}

// fp16 gradients overflow for real: with |dL/dw| = 3 a scale of 65536 gives 196608 > 65504
// (fp16 max), and so does 32768; at 16384 the step goes through. The scaler must skip twice,
// leave the weights untouched while skipping, then train to the solution and regrow its scale.
TEST(LossScaler, RecoversFromRealFp16OverflowAndKeepsTraining) {
  DynamicLossScaler scaler(65536.0, 5);
  auto w = torch::zeros({4}, torch::TensorOptions().dtype(torch::kHalf).requires_grad(true));
  const auto target = torch::tensor({1.5, -1.5, 1.5, -1.5}).to(torch::kHalf);
  std::vector<bool> skipped;
  for (int64_t step = 1; step <= 40; ++step) {
    w.mutable_grad() = torch::Tensor();
    // float32 loss as autocast produces it; the cast back to w's dtype makes the grads fp16.
    const auto loss = (w.to(torch::kFloat) - target.to(torch::kFloat)).pow(2).sum();  // dL/dw = 2(w - t) = -3, 3
    scaler.scale(loss).backward();
    ASSERT_EQ(w.grad().scalar_type(), torch::kHalf);
    const auto before = w.detach().clone();
    const bool overflow = scaler.unscale_and_check(w.grad());
    if (!overflow) {
      torch::NoGradGuard no_grad;
      w.sub_(w.grad() * 0.1);
    } else {
      EXPECT_TRUE(torch::equal(before, w.detach()));
    }
    scaler.update(overflow, step);
    skipped.push_back(overflow);
  }
  EXPECT_EQ(std::vector<bool>(skipped.begin(), skipped.begin() + 3), (std::vector<bool>{true, true, false}));
  EXPECT_EQ(scaler.skipped_steps(), 2);
  EXPECT_TRUE(torch::allclose(w.detach().to(torch::kFloat), target.to(torch::kFloat), 0, 1e-2));
  EXPECT_GT(scaler.current_scale(), 16384.0);  // grew back after clean streaks
}

}  // namespace RCL_UNITY_ID
}  // namespace
}  // namespace rcl
