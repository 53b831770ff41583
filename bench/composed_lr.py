#!/usr/bin/env python3
"""The composed model's first losses with and without the gemm mode's width scaling of the
learning rate and init (learning_rate x h/h', init_std x sqrt(h/h'), docs/stress-modes.md).

  python3 bench/composed_lr.py BINARY --output bench/composed-lr.md            # the CPU's posed shape
  python3 bench/composed_lr.py BINARY --device gpu --output bench/composed-lr-gpu.md   # the main job

Both columns take the composed `small --stress all` config that the binary itself resolves
(`--print-config`): "before" with stress_profile.gemm.*_width_exponent=0 (the values every mode
kept before the scaling: 6e-4 and 0.02), "after" with the defaults. On the GPU each run is the main
job itself. On the CPU it is that model scaled down where a CPU cannot afford it and kept where
the jump could come from: the width (2112, 12 heads), the vocabulary (50257, tied LM head), every
mode's structure (sandwich norms, qk_norm, the Q/K/V conv, SwiGLU, dropout and drop_path,
activation checkpointing, the padded batches where libtorch >= 2.0), but 2 blocks, 2 sequences of
16 tokens a step and float32: the gemm mode's bf16 sends every GEMM of this host's libtorch
through its reference loop (no AVX512-BF16: one 16-token step of one block took minutes), so the
CPU runs every mode but gemm and sets what gemm would (width, FFN multiplier, learning rate,
init std). A second table starts at the peak learning rate (warm-up of 1 step): the rates
themselves at this width, which the first 20 steps of a 50-step warm-up only approach (first seed).

Writes the markdown tables to --output (replacing it) and prints them.
"""
import argparse
import json
import subprocess
import tempfile
from pathlib import Path

COMPOSED = ["--preset", "small", "--stress", "all"]
UNSCALED = ["--set", "stress_profile.gemm.learning_rate_width_exponent=0",
            "--set", "stress_profile.gemm.init_std_width_exponent=0"]
# What the CPU cannot afford, scaled down; the diagnostics off (they do not change the losses).
CPU_POSED = ["--set", "num_layers=2", "--set", "stress_profile.fusion.min_num_layers=2",
             "--set", "seq_len=16", "--set", "stress_profile.memory.min_seq_len=16",
             "--set", "stress_profile.memory.min_grad_accum_steps=1",
             "--set", "stress_profile.attention.probe_seq_len=16",
             "--set", "diagnostics.enabled=false", "--watchdog-timeout", "3000"]
# The fields the gemm mode writes, set by hand where the CPU runs without it.
GEMM_FIELDS = ["hidden_size", "ffn_multiplier", "learning_rate", "init_std"]


# The gemm mode's fields do not depend on what CPU_POSED scales down, and with it the config fits
# the host that prints it (the full composition is refused on a host of less than ~52 GiB).
def composed(binary, extra):
    args = [binary, *COMPOSED, *extra, *CPU_POSED, "--print-config"]
    out = subprocess.run(args, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)["training"]


def run_args(device, training, seed, steps, warmup):
    schedule = ["--seed", str(seed), "--steps", str(steps)] + (["--set", f"warmup_steps={warmup}"] if warmup else [])
    if device == "gpu":
        return [*COMPOSED, "--device", "gpu", *schedule]
    gemm = [a for f in GEMM_FIELDS for a in ("--set", f"{f}={training[f]!r}")]
    return ["--preset", "small", "--stress", "rng,comm,memory,fusion,attention", "--device", "cpu",
            "--set", "mixed_precision=fp32",
            *gemm, *CPU_POSED, *schedule]


def losses(binary, args, out):
    proc = subprocess.run([binary, *args, "--output-dir", str(out)], capture_output=True, text=True)
    metrics = out / "metrics.jsonl"
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()] if metrics.exists() else []
    return proc.returncode, [r["loss"] for r in rows], [r.get("grad_norm") for r in rows]


def table(title, results, steps):
    seeds = sorted({seed for _, seed in results})
    head = "| step | " + " | ".join(f"{arm} seed {s}" for s in seeds for arm in ("before", "after")) + " |"
    lines = [f"### {title}\n", head, "|---" * (1 + 2 * len(seeds)) + "|"]
    for i in range(steps):
        cells = []
        for s in seeds:
            for arm in ("before", "after"):
                rc, loss, _ = results[(arm, s)]
                cells.append(f"{loss[i]:.3f}" if i < len(loss) else ("-" if rc == 0 else f"exit {rc}"))
        lines.append(f"| {i + 1} | " + " | ".join(cells) + " |")
    worst = {arm: max((results[(arm, s)][1][1] - results[(arm, s)][1][0] for s in seeds
                       if len(results[(arm, s)][1]) > 1), default=float("nan")) for arm in ("before", "after")}
    norms = {arm: max((g for s in seeds for g in results[(arm, s)][2][:steps] if g is not None), default=float("nan"))
             for arm in ("before", "after")}
    lines.append(f"\nLargest step-2 minus step-1 loss over the seeds: before {worst['before']:+.3f}, "
                 f"after {worst['after']:+.3f} nats; largest gradient norm (before clipping): before "
                 f"{norms['before']:.1f}, after {norms['after']:.1f}.\n")
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("binary")
    parser.add_argument("--device", choices=["cpu", "gpu"], default="cpu")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1234, 1])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--peak-steps", type=int, default=10, help="steps of the peak-rate table, first seed (0: none)")
    parser.add_argument("--output", type=Path, required=True)
    a = parser.parse_args()
    arms = {"before": composed(a.binary, UNSCALED), "after": composed(a.binary, [])}
    # (title, warm-up override, steps, seeds): the peak-rate probe on the first seed only (CPU time).
    sections = [("warm-up as composed", 0, a.steps, a.seeds)] + (
        [("peak rate from step 1", 1, a.peak_steps, a.seeds[:1])] if a.peak_steps else [])
    text = ["# The composed model's first losses, before and after the width scaling (bench/composed_lr.py)\n",
            f"`small --stress all` as this binary composes it: {arms['before']['hidden_size']} wide, vocabulary "
            f"{arms['before']['vocab_size']}; before: learning rate {arms['before']['learning_rate']:.3g}, init std "
            f"{arms['before']['init_std']:.3g}; after: {arms['after']['learning_rate']:.3g}, "
            f"{arms['after']['init_std']:.3g}; warm-up {arms['before']['warmup_steps']} steps.",
            ("Each run is the main job on the GPU." if a.device == "gpu" else
             "On the CPU: 2 blocks, 2 x 16 tokens a step, float32, every mode but gemm with gemm's fields set "
             "(the script's header says why)."), ""]
    with tempfile.TemporaryDirectory(prefix="rcl-composed-lr.") as work:
        for title, warmup, steps, seeds in sections:
            results = {}
            for seed in seeds:
                for arm, training in arms.items():
                    out = Path(work) / f"{arm}-{seed}-{warmup}"
                    results[(arm, seed)] = losses(a.binary, run_args(a.device, training, seed, steps, warmup), out)
            text += table(title, results, steps)
    a.output.write_text("\n".join(text))
    print("\n".join(text))


if __name__ == "__main__":
    main()
