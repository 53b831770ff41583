#!/usr/bin/env python3
"""GPU throughput: the C++ trainer against its Python peer, MFU against a measured bf16 GEMM peak.

Run by scripts/gpu/run.sh on a GPU machine (python3 there holds a GPU build of PyTorch; its
torch.cuda is the HIP device on a ROCm build). For each configuration the C++ binary and, where
the peer replicates the configuration, bench/python_peer.py train the same shapes for `--steps`
steps with diagnostics at their defaults. A step's time is the wall time between consecutive
step lines on the console (the trainer prints step N once step N+1 is queued and N's scalars
landed, so in steady state that interval is one step of device work plus host gaps); the C++
trainer's own step_time_s is shown beside it. MFU = FLOPs/token * tokens/s / peak, with peak =
the best 8192^3 bf16 torch.mm on the same GPU.
Writes a markdown report to --output (and prints it).
"""
import argparse
import datetime
import json
import statistics
import subprocess
import shutil
import sys
import tempfile
from pathlib import Path

import torch

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))
from python_peer import measure_peak_gflops  # noqa: E402
from run_bench import LOG_MODEL, step_wall_times  # noqa: E402

# (label, preset, extra C++ arguments, whether the Python peer replicates it, MFU goal, whether
# a second run without the shadow check measures the check's cost)
CONFIGS = [
    # math named: the default (`auto`) is SDPA on a GPU.
    ("small, math attention", "small", ["--set", "attention_backend=math"], True, 0.40, False),
    ("small, SDPA", "small", ["--set", "attention_backend=sdpa"], True, 0.40, True),
    # large with math attention holds B*H*T^2 score tensors per layer (> 80 GB): fused SDPA only.
    ("large, SDPA", "large", ["--set", "attention_backend=sdpa"], False, 0.55, True),
]
PEER_GOAL = 1.05  # C++ tokens/s >= 1.05x the Python eager peer on `small`
SHADOW_GOAL = 0.01  # the shadow check costs <= 1% of step time
SHADOW_OFF = ["--set", "diagnostics.shadow_check_interval=0"]
COUNT_READS = ["--set", "diagnostics.count_host_reads=true"]


def run_cpp(binary, preset, extra, steps, warmup, runs_dir):
    """One C++ run; its log, report, metrics and config stay in runs_dir (not its checkpoints)."""
    out_dir = Path(tempfile.mkdtemp(prefix=f"{preset}-", dir=runs_dir))
    cmd = [str(binary), "--device", "gpu", "--preset", preset, "--steps", str(steps),
           "--output-dir", str(out_dir), "--overwrite", *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    log = proc.stdout + proc.stderr
    kept = {name: runs_dir / f"{out_dir.name}.{name}" for name in ("log", "report.json", "metrics.jsonl", "config.json")}
    kept["log"].write_text(" ".join(cmd) + "\n" + log)
    for name in ("report.json", "metrics.jsonl", "config.json"):
        if (out_dir / name).exists():
            shutil.copy(out_dir / name, kept[name])
    shutil.rmtree(out_dir)
    if proc.returncode not in (0, 1):  # 1: findings; the run itself completed
        return {"error": f"exit {proc.returncode}: {log[-1500:]}"}
    records = [json.loads(line) for line in kept["metrics.jsonl"].read_text().splitlines() if line]
    walls = step_wall_times(log)
    timed_walls = [walls[s] for s in walls if s > warmup]
    model = LOG_MODEL.search(log)
    report = json.loads(kept["report.json"].read_text())
    return {
        "tokens_per_step": records[-1]["tokens"],
        "tokens_per_s": records[-1]["tokens"] / statistics.median(timed_walls),
        "own_tokens_per_s": statistics.median(r["tokens_per_s"] for r in records if r["step"] > warmup),
        "flops_per_token": float(model.group(2)),
        "parameters": int(model.group(1)),
        "peak_allocated_gib": max(r["memory"]["peak_allocated_bytes"] for r in records) / 2**30,
        # The sizing model's prediction for what ran (docs/sizing.md): the allocator's peak, no slack.
        "predicted_allocated_gib": json.loads(kept["config.json"].read_text())
        .get("sizing", {}).get("allocated_peak_bytes", float("nan")) / 2**30,
        "verdict": report.get("verdict", report.get("outcome", "?")),
        "host_reads": [r["host_reads"] for r in records if r["step"] > warmup and "host_reads" in r],
        "config": kept["config.json"],
    }


def predicted_cell(cpp):
    predicted, measured = cpp["predicted_allocated_gib"], cpp["peak_allocated_gib"]
    if predicted != predicted:  # NaN: a binary from before the sizing model
        return "-"
    error = predicted / measured - 1
    return f"{predicted:.1f} GiB ({100 * error:+.0f}%, {'met' if abs(error) <= 0.15 else '**missed**'})"


def run_peer(config_path, steps, warmup, peak_gflops):
    cmd = [sys.executable, str(BENCH_DIR / "python_peer.py"), "--config", str(config_path),
           "--device", "cuda", "--steps", str(steps), "--warmup", str(warmup), "--threads", "1",
           "--peak-gflops", str(peak_gflops)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        return {"error": proc.stderr[-1500:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--binary", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("gpu_bench: no GPU visible to torch")

    started = datetime.datetime.now(datetime.timezone.utc)
    peak = measure_peak_gflops(torch.bfloat16, 1, size=8192, seconds=3.0, device="cuda")
    rows, shadow_rows = [], []
    # Each run's log, report, metrics and config land in bench-runs/ beside the output.
    runs_dir = args.output.parent / "bench-runs"
    runs_dir.mkdir(parents=True, exist_ok=True)
    for label, preset, extra, peer, goal, shadow_cost in CONFIGS:
        cpp = run_cpp(args.binary, preset, extra, args.steps, args.warmup, runs_dir)
        py = run_peer(cpp["config"], args.steps, args.warmup, peak) if peer and "error" not in cpp else None
        rows.append((label, goal, cpp, py))
        if shadow_cost and "error" not in cpp:
            off = run_cpp(args.binary, preset, extra + SHADOW_OFF, args.steps, args.warmup, runs_dir)
            shadow_rows.append((label, cpp, off))
    # Blocking device-to-host reads per step, counted by the trainer's own hook (a separate
    # run: the RecordFunction callback that counts them costs time itself).
    reads = run_cpp(args.binary, "small", ["--set", "attention_backend=sdpa", *COUNT_READS],
                    args.steps, args.warmup, runs_dir)

    props = torch.cuda.get_device_properties(0)
    lines = [
        "# rocm-conformance-llm GPU benchmark: C++ trainer vs Python peer, MFU",
        "",
        f"- date: {started:%Y-%m-%d %H:%M} UTC; written by `bench/gpu_bench.py` (via scripts/gpu/run.sh)",
        f"- GPU: {props.name}, {props.total_memory / 2**30:.0f} GiB; torch {torch.__version__} "
        f"(CUDA {torch.version.cuda}, HIP {torch.version.hip}); the C++ binary links the same libtorch",
        f"- peak = best 8192^3 bf16 torch.mm on this GPU: {peak / 1e3:.0f} TFLOP/s",
        f"- {args.steps} steps per run, the first {args.warmup} left out; diagnostics at their defaults",
        "",
        "| configuration | params | tokens/step | C++ tok/s (wall) | C++ tok/s (its own step_time_s) "
        "| Python tok/s | C++/Python | C++ MFU | MFU goal | peak allocated | predicted (goal: within 15%) | verdict |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---|",
    ]
    for label, goal, cpp, py in rows:
        if "error" in cpp:
            lines.append(f"| {label} | run failed: {cpp['error'].splitlines()[-1] if cpp['error'] else ''} |")
            continue
        mfu = cpp["flops_per_token"] * cpp["tokens_per_s"] / (peak * 1e9)
        if py is None:
            py_cell, ratio = "not replicated", "-"
        elif "error" in py:
            py_cell, ratio = "failed", "-"
        else:
            py_cell = f"{py['tokens_per_s']:.0f}"
            r = cpp["tokens_per_s"] / py["tokens_per_s"]
            ratio = f"{r:.2f}x ({'met' if r >= PEER_GOAL else '**missed**'} >= {PEER_GOAL}x)"
        lines.append(
            f"| {label} | {cpp['parameters']:,} | {cpp['tokens_per_step']} | {cpp['tokens_per_s']:.0f} "
            f"| {cpp['own_tokens_per_s']:.0f} | {py_cell} | {ratio} | {100 * mfu:.1f}% "
            f"| >= {100 * goal:.0f}% {'met' if mfu >= goal else '**missed**'} "
            f"| {cpp['peak_allocated_gib']:.1f} GiB | {predicted_cell(cpp)} | {cpp['verdict']} |")
    lines += ["", "## The shadow check's cost (goal: <= 1% of step time)", "",
              "| configuration | tok/s with the check (every step) | tok/s without | overhead | goal |",
              "|---|---:|---:|---:|---|"]
    for label, on, off in shadow_rows:
        if "error" in off:
            lines.append(f"| {label} | {on['tokens_per_s']:.0f} | run failed | - | - |")
            continue
        overhead = off["tokens_per_s"] / on["tokens_per_s"] - 1.0
        lines.append(f"| {label} | {on['tokens_per_s']:.0f} | {off['tokens_per_s']:.0f} | {100 * overhead:+.1f}% "
                     f"| <= {100 * SHADOW_GOAL:.0f}% {'met' if overhead <= SHADOW_GOAL else '**missed**'} |")
    lines += ["", "## Blocking device-to-host reads per step (goal: 0 in an ordinary step)", ""]
    if "error" in reads:
        lines.append(f"- counting run failed: {reads['error'].splitlines()[-1] if reads['error'] else ''}")
    else:
        counts = reads["host_reads"]
        histogram = ", ".join(f"{n} read(s): {counts.count(n)} step(s)" for n in sorted(set(counts)))
        lines.append(f"- small, SDPA, steps {args.warmup + 1}-{args.steps} with diagnostics at their defaults "
                     f"(steps that run a periodic check read back its verdict): {histogram}")
    text = "\n".join(lines) + "\n"
    args.output.write_text(text)
    print(text)
    for label, _, cpp, py in rows:
        for name, res in (("C++", cpp), ("Python", py)):
            if res and "error" in res:
                print(f"{label} {name} error:\n{res['error']}", file=sys.stderr)


if __name__ == "__main__":
    main()
