#!/usr/bin/env python3
"""CPU figures for the kernel paths a run chooses: the fused AdamW kernel against the plain
whole-buffer update, deterministic algorithms on every step ("all") against only around the
replayed steps ("replay"), and grouped-query attention against multi-head attention.

    bench/kernel_paths.py [--binary build/rocm-conformance-llm] [--repeats 3]

The AdamW figures need a torch with at::_fused_adamw_ on the CPU (>= 2.4: the wheel lane's,
`source scripts/wheel/env.sh`); they time the same sequence of whole-buffer ops FlatAdamW's
plain path runs (workload/optimizer.cpp) against torch._fused_adamw_ on one flat buffer.
The run figures are the binary's own median tokens/s (metrics.jsonl), best of --repeats runs
(2 shared cores: the least disturbed run). A script, not a test: nothing here asserts a time.
"""
import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def plain_adamw(p, g, m, v, step, lr=1e-3, b1=0.9, b2=0.95, eps=1e-8, wd=0.1):
    """FlatAdamW's plain update (workload/optimizer.cpp), whole-buffer ops, update applied."""
    import torch
    apply = torch.tensor(True)
    either = lambda a, w: torch.where(apply, torch.tensor(a), torch.tensor(w))  # noqa: E731
    g.masked_fill_(apply.logical_not(), 0.0)
    p.mul_(either(1 - lr * wd, 1.0))
    m.mul_(either(b1, 1.0)).add_(g, alpha=1 - b1)
    v.mul_(either(b2, 1.0)).addcmul_(g, g, value=1 - b2)
    denom = (v.sqrt() / math.sqrt(1 - b2 ** step)).add_(either(eps, math.inf))
    p.addcdiv_(m, denom, value=-lr / (1 - b1 ** step))


def fused_adamw(p, g, m, v, step, lr=1e-3, b1=0.9, b2=0.95, eps=1e-8, wd=0.1):
    import torch
    found_inf = torch.zeros((), dtype=torch.float)
    steps = torch.tensor(float(step))
    torch._fused_adamw_([p], [g], [m], [v], [], [steps], lr=lr, beta1=b1, beta2=b2, weight_decay=wd, eps=eps,
                        amsgrad=False, maximize=False, grad_scale=None, found_inf=found_inf)


def time_update(update, numel, steps=20):
    import torch
    torch.manual_seed(0)
    p, g = torch.randn(numel), torch.randn(numel)
    m, v = torch.zeros(numel), torch.zeros(numel)
    update(p, g, m, v, 1)
    times = []
    for step in range(2, steps + 2):
        start = time.perf_counter()
        update(p, g, m, v, step)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def adamw_rows(threads):
    import torch
    torch.set_num_threads(threads)
    if not hasattr(torch, "_fused_adamw_"):
        return [f"torch {torch.__version__} has no _fused_adamw_: skipped"]
    rows = [f"AdamW update, torch {torch.__version__}, {threads} threads, median of 20 steps:", "",
            "| parameters | plain (ms) | fused (ms) | plain / fused |", "|---|---|---|---|"]
    for numel in (1_000_000, 10_000_000, 50_000_000):
        plain, fused = time_update(plain_adamw, numel), time_update(fused_adamw, numel)
        rows.append(f"| {numel:,} | {plain * 1e3:.1f} | {fused * 1e3:.1f} | {plain / fused:.2f} |")
    return rows


def median_tokens_per_s(binary, args, steps):
    with tempfile.TemporaryDirectory() as out:
        cmd = [str(binary), "--preset", "cpu-medium", "--steps", str(steps), "--output-dir", out, *args]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        records = [json.loads(line) for line in Path(out, "metrics.jsonl").read_text().splitlines() if line.strip()]
        rates = [r["tokens_per_s"] for r in records if r.get("step", 0) > 2 and "tokens_per_s" in r]
        return statistics.median(rates)


def run_rows(binary, repeats):
    cases = [
        ("rng mode, determinism replay (the mode's level now)", ["--stress", "rng"]),
        ("rng mode, determinism all (every step, as before)", ["--stress", "rng", "--set", "determinism=all"]),
        ("multi-head attention (8 heads)", []),
        ("grouped-query attention (8 heads, 2 KV heads)", ["--set", "num_key_value_heads=2"]),
    ]
    rows = [f"cpu-medium, {binary.name}, best of {repeats} runs of 16 steps (median tokens/s of steps 3..16):", "",
            "| run | tokens/s |", "|---|---|"]
    for label, args in cases:
        best = max(median_tokens_per_s(binary, args, 16) for _ in range(repeats))
        rows.append(f"| {label} | {best:.0f} |")
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", type=Path, default=REPO / "build" / "rocm-conformance-llm")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--skip-runs", action="store_true", help="AdamW figures only")
    args = parser.parse_args()
    rows = adamw_rows(args.threads)
    if not args.skip_runs:
        rows += [""] + run_rows(args.binary, args.repeats)
    print("\n".join(rows))


if __name__ == "__main__":
    sys.exit(main())
