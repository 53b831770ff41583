#!/usr/bin/python3
"""The C++ trainer's model and optimizer step, written with PyTorch's Python API.

The benchmark's reference point: same architecture (rocm_conformance_llm/model.cpp), same
initialisation, same AdamW groups and hyper-parameters, same clipping and bf16 autocast
pattern as rocm_conformance_llm/loop/trainer.cpp, on the same libtorch. Only the language around
the ATen calls differs, so tokens/s C++ vs Python measures the host-side overhead of each.

Shapes come from the C++ tool itself (`rocm-conformance-llm --print-config` output or a run's
config.json), so there is no second copy of the presets to drift. Configurations using knobs
this peer does not replicate (RMSNorm, SwiGLU, Q/K/V conv, ...) are refused, not approximated.

Prints one JSON object: median tokens/s over the timed steps, FLOPs/token, MFU.
Run with /usr/bin/python3 (Debian's python3-torch 1.13).
"""
import argparse
import json
import math
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

INIT_STD = 0.02      # model.cpp kInitStd (GPT-2)
NORM_EPS = 1e-5      # model.cpp kNormEps
ADAM_BETAS = (0.9, 0.95)  # loop/trainer.cpp
ADAM_EPS = 1e-8
SYNTHETIC_VOCAB = 64  # data.hpp SyntheticSpec::vocab_size, used when vocab_size is 0


def resolved_training(config_doc):
    """The training section of a --print-config / config.json document, vocab resolved."""
    cfg = dict(config_doc.get("training", config_doc))
    unsupported = {
        "position": ("learned", "rotary"), "norm": ("layernorm",), "norm_layout": ("pre",),
        "activation": ("gelu",), "attention_backend": ("math", "sdpa"), "qk_norm": (False,),
        "qkv_conv_kernel": (0,), "drop_path": (0.0, 0), "activation_checkpointing": (False,),
        "mixed_precision": ("fp32", "bf16"), "data_path": ("",),
    }
    for key, allowed in unsupported.items():
        if cfg[key] not in allowed:
            sys.exit(f"python_peer: {key}={cfg[key]!r} is not replicated here (supported: {allowed})")
    if cfg["vocab_size"] == 0:
        cfg["vocab_size"] = SYNTHETIC_VOCAB
    return cfg


def flops_per_token(cfg, params):
    """model.cpp flops_per_token: 6 * matmul parameters + 12 * L * hidden * T (PaLM app. B)."""
    matmul_params = params
    if cfg["position"] == "learned":
        matmul_params -= cfg["seq_len"] * cfg["hidden_size"]  # the position table is a lookup
    return 6.0 * matmul_params + 12.0 * cfg["num_layers"] * cfg["hidden_size"] * cfg["seq_len"]


def apply_rotary(x):
    """model.cpp apply_rotary: GPT-NeoX "rotate half" on x [B, heads, T, head_dim]."""
    seq, head_dim = x.shape[2], x.shape[3]
    inv_freq = torch.pow(10000.0, -torch.arange(0, head_dim, 2, dtype=torch.double) / head_dim)
    angles = torch.outer(torch.arange(seq, dtype=torch.double), inv_freq)
    full = torch.cat([angles, angles], -1)  # [T, head_dim]
    compute = torch.promote_types(x.dtype, torch.float32)
    xc = x.to(compute)
    x1, x2 = xc[..., :head_dim // 2], xc[..., head_dim // 2:]
    rotated = torch.cat([-x2, x1], -1)
    return (xc * full.cos().to(compute) + rotated * full.sin().to(compute)).to(x.dtype)


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        c = cfg["hidden_size"]
        self.heads = cfg["num_heads"]
        self.head_dim = c // self.heads
        self.dropout = cfg["dropout"]
        self.rotary = cfg["position"] == "rotary"
        self.sdpa = cfg["attention_backend"] == "sdpa"
        self.qkv = nn.Linear(c, 3 * c)
        self.proj = nn.Linear(c, c)

    def forward(self, x):
        batch, seq, width = x.shape
        q, k, v = (t.reshape(batch, seq, self.heads, self.head_dim).transpose(1, 2)
                   for t in self.qkv(x).split(width, -1))
        if self.rotary:
            q, k = apply_rotary(q), apply_rotary(k)
        if self.sdpa:  # model.cpp sdpa_attention without a padding mask: libtorch picks the kernel
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0,
                                               is_causal=True)
            return self.proj(y.transpose(1, 2).reshape(batch, seq, width))
        scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))
        masked = torch.ones(seq, seq, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.masked_fill(masked, -math.inf)
        compute = torch.promote_types(scores.dtype, torch.float32)
        probs = scores.softmax(-1, dtype=compute).to(v.dtype)
        probs = F.dropout(probs, self.dropout, self.training)
        y = torch.matmul(probs, v).transpose(1, 2).reshape(batch, seq, width)
        return self.proj(y)


class Mlp(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        ffn = math.floor(cfg["ffn_multiplier"] * cfg["hidden_size"] + 0.5)  # llround
        self.up = nn.Linear(cfg["hidden_size"], ffn)
        self.down = nn.Linear(ffn, cfg["hidden_size"])

    def forward(self, x):
        return self.down(F.gelu(self.up(x)))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        c = cfg["hidden_size"]
        self.dropout = cfg["dropout"]
        self.norm_attn = nn.LayerNorm(c, eps=NORM_EPS)
        self.attn = CausalSelfAttention(cfg)
        self.norm_mlp = nn.LayerNorm(c, eps=NORM_EPS)
        self.mlp = Mlp(cfg)

    def forward(self, x):
        h = x + F.dropout(self.attn(self.norm_attn(x)), self.dropout, self.training)
        return h + F.dropout(self.mlp(self.norm_mlp(h)), self.dropout, self.training)


class GPT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        c = cfg["hidden_size"]
        self.dropout = cfg["dropout"]
        self.wte = nn.Embedding(cfg["vocab_size"], c)
        self.wpe = nn.Embedding(cfg["seq_len"], c) if cfg["position"] == "learned" else None
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg["num_layers"]))
        self.final_norm = nn.LayerNorm(c, eps=NORM_EPS)
        residual_std = INIT_STD / math.sqrt(2.0 * cfg["num_layers"])
        with torch.no_grad():
            self.wte.weight.normal_(0.0, INIT_STD)
            if self.wpe is not None:
                self.wpe.weight.normal_(0.0, INIT_STD)
            for block in self.blocks:
                for layer, std in ((block.attn.qkv, INIT_STD), (block.attn.proj, residual_std),
                                   (block.mlp.up, INIT_STD), (block.mlp.down, residual_std)):
                    layer.weight.normal_(0.0, std)
                    layer.bias.zero_()

    def forward(self, tokens):
        seq = tokens.shape[1]
        x = self.wte(tokens)
        if self.wpe is not None:
            x = x + self.wpe(torch.arange(seq, device=tokens.device))
        x = F.dropout(x, self.dropout, self.training)
        for block in self.blocks:
            x = block(x)
        return F.linear(self.final_norm(x), self.wte.weight)  # tied LM head


def lm_loss(logits, targets):
    flat = logits.reshape(-1, logits.shape[-1]).to(torch.promote_types(logits.dtype, torch.float32))
    return F.cross_entropy(flat, targets.reshape(-1), reduction="none").view(targets.shape).mean()


def learning_rate_at(cfg, step):
    """loop/trainer.cpp learning_rate_at: linear warm-up, cosine decay to lr * min_lr_ratio."""
    if step <= cfg["warmup_steps"]:
        return cfg["learning_rate"] * step / cfg["warmup_steps"]
    min_lr = cfg["learning_rate"] * cfg["min_lr_ratio"]
    progress = min(1.0, (step - cfg["warmup_steps"]) / max(1, cfg["steps"] - cfg["warmup_steps"]))
    return min_lr + 0.5 * (cfg["learning_rate"] - min_lr) * (1.0 + math.cos(math.pi * progress))


def make_optimizer(model, cfg):
    """AdamW with weight decay on the Linear weight matrices only (model.cpp decay groups)."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        embedding = name.startswith("wte.") or name.startswith("wpe.")
        (decay if p.dim() == 2 and not embedding else no_decay).append(p)
    return torch.optim.AdamW([{"params": decay, "weight_decay": cfg["weight_decay"]},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=cfg["learning_rate"], betas=ADAM_BETAS, eps=ADAM_EPS)


def clip_grad_norm(params, max_norm):
    """loop/trainer.cpp clip_grad_norm (torch.nn.utils.clip_grad_norm_'s arithmetic, no host read)."""
    grads = [p.grad for p in params if p.grad is not None]
    total = torch.stack([g.norm() for g in grads]).norm()
    if max_norm > 0:
        coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
        for g in grads:
            g.mul_(coef)
    return total


def synchronize(device):
    """Waits for the device's queued work (a no-op on CPU); torch.cuda is HIP on ROCm."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure_peak_gflops(dtype, threads, size=2048, seconds=1.5, device="cpu"):
    """Best-of GFLOP/s of a size^3 torch.mm: this machine's practical matmul peak."""
    device = torch.device(device)
    torch.set_num_threads(threads)
    a = torch.randn(size, size, device=device).to(dtype)
    b = torch.randn(size, size, device=device).to(dtype)
    torch.mm(a, b)  # first call: BLAS kernel selection and buffers
    synchronize(device)
    best = 0.0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        start = time.perf_counter()
        torch.mm(a, b)
        synchronize(device)
        best = max(best, 2.0 * size ** 3 / (time.perf_counter() - start) / 1e9)
    return best


def train(cfg, steps, threads, device):
    """Runs `steps` optimizer steps; returns the per-step wall times (loop/trainer.cpp train_step).

    On a GPU the step's scalars are read one step late, as the C++ trainer does, so the host
    queues step N+1 while the device runs step N; a step's wall time is then the device's."""
    torch.set_num_threads(threads)
    torch.manual_seed(cfg["seed"])
    model = GPT(cfg).to(device)
    model.train()
    params = list(model.parameters())
    optimizer = make_optimizer(model, cfg)
    bf16 = cfg["mixed_precision"] == "bf16"
    batch, seq, accum = cfg["batch_size"], cfg["seq_len"], cfg["grad_accum_steps"]
    data = torch.Generator().manual_seed(cfg["seed"])
    step_times, losses, pending = [], [], None
    for step in range(1, steps + 1):
        start = time.perf_counter()
        lr = learning_rate_at(cfg, step)
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.zero_grad(set_to_none=False)  # libtorch 1.13's zero_grad zeroes in place
        loss_sum = torch.zeros((), device=device)
        for _ in range(accum):
            # Content does not change throughput: random tokens of the same vocab and shape.
            window = torch.randint(0, cfg["vocab_size"], (batch, seq + 1), generator=data)
            if device.type != "cpu":
                window = window.pin_memory().to(device, non_blocking=True)
            inputs, targets = window[:, :seq], window[:, 1:]
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
                loss = lm_loss(model(inputs), targets)
            loss_sum += loss.detach()
            (loss / accum).backward()  # outside autocast, as in loop/trainer.cpp
        grad_norm = clip_grad_norm(params, cfg["grad_clip"])
        optimizer.step()
        scalars = torch.stack([loss_sum / accum, grad_norm]).double()
        if pending is not None:
            losses.append(pending.tolist()[0])  # the previous step's, as the C++ trainer reads
        pending = scalars
        step_times.append(time.perf_counter() - start)
    losses.append(pending.tolist()[0])
    return step_times, losses, sum(p.numel() for p in params)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True,
                        help="JSON from `rocm-conformance-llm --print-config ...` or a run's config.json")
    parser.add_argument("--steps", type=int, default=0, help="optimizer steps (0: the config's)")
    parser.add_argument("--warmup", type=int, default=3, help="leading steps left out of the median")
    parser.add_argument("--threads", type=int, required=True, help="torch.set_num_threads")
    parser.add_argument("--device", default="cpu", help="cpu, or cuda (the HIP device on ROCm)")
    parser.add_argument("--peak-gflops", type=float, default=0.0,
                        help="matmul peak for MFU in the run's precision (0: measure it here)")
    args = parser.parse_args()

    with open(args.config) as f:
        cfg = resolved_training(json.load(f))
    args.steps = args.steps or cfg["steps"]
    if args.steps <= args.warmup:
        sys.exit("python_peer: --steps must exceed --warmup")
    dtype = torch.bfloat16 if cfg["mixed_precision"] == "bf16" else torch.float32
    device = torch.device(args.device)
    peak = args.peak_gflops or measure_peak_gflops(dtype, args.threads, device=device)

    step_times, losses, params = train(cfg, args.steps, args.threads, device)
    tokens = cfg["grad_accum_steps"] * cfg["batch_size"] * cfg["seq_len"]
    timed = step_times[args.warmup:]
    tokens_per_s = statistics.median(tokens / t for t in timed)
    fpt = flops_per_token(cfg, params)
    print(json.dumps({
        "impl": "python", "device": str(device), "precision": cfg["mixed_precision"], "threads": torch.get_num_threads(),
        "parameters": params, "flops_per_token": fpt, "tokens_per_step": tokens,
        "steps": args.steps, "timed_steps": len(timed),
        "median_step_time_s": statistics.median(timed), "tokens_per_s": tokens_per_s,
        "peak_gflops": peak, "mfu": fpt * tokens_per_s / (peak * 1e9),
        "first_loss": losses[0], "last_loss": losses[-1],
    }))


if __name__ == "__main__":
    main()
