#!/usr/bin/env python3
"""The fit on a real GPU: stress-mode compositions fitted to the GPU's own memory, each run for a
few steps, the sizing model's predicted allocated peak against the allocator's measured one.

Run by scripts/gpu/run.sh (stage `fit`) on a GPU machine. Each composition runs with one
micro-batch per optimizer step before the fit (`stress_profile.memory.min_grad_accum_steps=1`:
the memory mode's accumulation multiplies step time, not the micro-batch's memory), time-boxed
by `--duration`. The goal (docs/sizing.md): none runs out of memory after the fit, and the
prediction (config.json `sizing.allocated_peak_bytes`) is within 15% of metrics.jsonl's largest
`memory.peak_allocated_bytes`. Writes a markdown table to --output (and prints it).
"""
import argparse
import datetime
import json
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path

import torch

# (preset, stress modes): the compositions that ran out of memory or crawled before, the attention
# mode's padded batches, and `large` under the modes that raise its memory most. With
# bench/gpu_bench.py's three configurations, nine predictions against measurements.
COMPOSITIONS = [
    ("small", "gemm,memory,fusion"),
    ("small", "all"),
    ("small", "attention"),
    ("small", "fusion,rng"),
    ("large", "memory"),
    ("large", "gemm,memory,fusion"),
]
GOAL = 0.15
ONE_MICRO_BATCH = ["--set", "stress_profile.memory.min_grad_accum_steps=1"]


def gib(n):
    return f"{n / 2**30:.1f} GiB"


def run(binary, preset, modes, steps, seconds, runs_dir):
    out_dir = Path(tempfile.mkdtemp(prefix=f"{preset}-{modes.replace(',', '-')}-", dir=runs_dir))
    cmd = [str(binary), "--device", "gpu", "--preset", preset, "--stress", modes, "--steps", str(steps),
           "--duration", f"{seconds}s", "--output-dir", str(out_dir), "--overwrite", *ONE_MICRO_BATCH]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60)
        code, log = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as stopped:
        code, log = "timeout", f"{stopped.stdout or ''}{stopped.stderr or ''}"
    (runs_dir / f"{out_dir.name}.log").write_text(" ".join(cmd) + "\n" + str(log))
    row = {"preset": preset, "modes": modes, "exit": code}
    config_path, metrics_path, report_path = (out_dir / n for n in ("config.json", "metrics.jsonl", "report.json"))
    if config_path.exists():
        config = json.loads(config_path.read_text())
        row["predicted"] = config.get("sizing", {}).get("allocated_peak_bytes")
        row["fit"] = ", ".join(f"{k} {v[0]}->{v[1]}" for k, v in (config.get("fit") or {}).get("changes", {}).items()) or "none"
    records = [json.loads(line) for line in metrics_path.read_text().splitlines() if line] if metrics_path.exists() else []
    if records:
        peak = max(r["memory"]["peak_allocated_bytes"] for r in records)
        row["measured"] = peak if peak > 0 else None  # -1: no allocator statistics
        row["step_s"] = statistics.median(r["step_time_s"] for r in records)
        row["steps"] = len(records)
    if report_path.exists():
        report = json.loads(report_path.read_text())
        row["verdict"] = report.get("verdict", "?")
        row["findings"] = sorted({f.get("signature", "?") for f in report.get("findings", [])})
    shutil.rmtree(out_dir)
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--binary", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--seconds", type=int, default=20, help="each run's --duration")
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--only", nargs="+", metavar="PRESET:MODES",
                        help="these compositions instead of the sample (e.g. small:gemm,memory,fusion)")
    args = parser.parse_args()
    compositions = [tuple(c.split(":", 1)) for c in args.only] if args.only else COMPOSITIONS
    started = datetime.datetime.now(datetime.timezone.utc)
    runs_dir = args.output.parent / "fit-runs"
    runs_dir.mkdir(parents=True, exist_ok=True)
    props = torch.cuda.get_device_properties(0)
    lines = [
        "# The fit on a GPU: predicted against measured allocated peak",
        "",
        f"- date: {started:%Y-%m-%d %H:%M} UTC; written by `bench/fit_sample.py` (via scripts/gpu/run.sh)",
        f"- GPU: {props.name}, {props.total_memory / 2**30:.0f} GiB; torch {torch.__version__}",
        f"- each run: up to {args.steps} steps or {args.seconds} s, one micro-batch per step before the fit",
        "",
        "| preset | stress | fit | exit | verdict | steps | step time | measured peak | predicted | error (goal: within 15%) |",
        "|---|---|---|---:|---|---:|---:|---:|---:|---|",
    ]
    for preset, modes in compositions:
        row = run(args.binary, preset, modes, args.steps, args.seconds, runs_dir)
        measured, predicted = row.get("measured"), row.get("predicted")
        if measured and predicted:
            error = predicted / measured - 1
            error_cell = f"{100 * error:+.0f}% {'met' if abs(error) <= GOAL else '**missed**'}"
        else:
            error_cell = "no step finished" if predicted else "not started"
        findings = f" ({', '.join(row['findings'])})" if row.get("findings") else ""
        cells = [preset, modes, row.get("fit", "-"), str(row["exit"]), row.get("verdict", "-") + findings,
                 str(row.get("steps", 0)), f"{row['step_s']:.2f} s" if measured else "-",
                 gib(measured) if measured else "-", gib(predicted) if predicted else "-", error_cell]
        lines.append("| " + " | ".join(cells) + " |")
        args.output.write_text("\n".join(lines) + "\n")  # each row as it lands: a device call may be cut short
    print("\n".join(lines))


if __name__ == "__main__":
    main()
