#!/usr/bin/env python3
"""Per-mode MFU on one GPU: each stress mode alone, all of them, all but one.

Run by scripts/gpu/run.sh (stage `mfu`) on a GPU machine. One bf16 GEMM peak is measured first
(the best 8192^3 torch.mm) and handed to every run as --device-peak-tflops, so each report.json
states its MFU in its `throughput` section against that peak and against the GPU model's
datasheet peak, counting model FLOPs and useful causal FLOPs (docs/performance.md: which figure
is which). Each run is time-boxed (--duration) so the whole table fits one device call; a step's
time is the median of the steps after the first --warmup, as the trainer timed them.
The 10-minute main job's optimizer steps are estimated as (600 s - start-up) / step time, the
start-up being what the run spent before its first step.
The speed levers have no switch (each is how the model now computes, shown to keep the CPU
losses: bench/loss-tolerance.md): measure one on and off by running this script with the build
before it (--binary) and after it, on the same machine.
Writes a markdown table to --output (and prints it); each run's report and log go to
mfu-runs/ beside it.
"""
import argparse
import datetime
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))
from python_peer import measure_peak_gflops  # noqa: E402

MODES = ["gemm", "rng", "comm", "memory", "fusion", "attention"]
MAIN_JOB_S = 600  # the README's main job
# The goals each row is held to (fraction of the measured peak), by label.
GOALS = {"small (no stress)": 0.40, "large (no stress)": 0.55, "small --stress all": 0.30}
MAIN_JOB_STEPS_GOAL = 100  # optimizer steps of `--stress all` on small in the 10-minute main job


def run_cpp(binary, device, preset, extra, duration_s, warmup, peak_tflops, runs_dir, label):
    out_dir = Path(tempfile.mkdtemp(prefix="run-", dir=runs_dir))
    cmd = [str(binary), "--device", device, "--preset", preset, "--steps", "100000", "--duration", f"{duration_s}s",
           "--device-peak-tflops", f"{peak_tflops:.6g}", "--output-dir", str(out_dir), "--overwrite", *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    slug = label.replace(" ", "_").replace("-", "").replace(",", "")
    (runs_dir / f"{slug}.log").write_text(" ".join(cmd) + "\n" + proc.stdout + proc.stderr)
    report_path = out_dir / "report.json"
    if report_path.exists():
        shutil.copy(report_path, runs_dir / f"{slug}.report.json")
    metrics = out_dir / "metrics.jsonl"
    records = [json.loads(line) for line in metrics.read_text().splitlines() if line] if metrics.exists() else []
    shutil.rmtree(out_dir)
    if not report_path.exists() and not (runs_dir / f"{slug}.report.json").exists():
        return {"error": f"exit {proc.returncode}, no report: {(proc.stdout + proc.stderr)[-800:]}"}
    report = json.loads((runs_dir / f"{slug}.report.json").read_text())
    timed = [r["step_time_s"] for r in records if r["step"] > warmup] or [r["step_time_s"] for r in records]
    if not timed:
        return {"error": f"exit {proc.returncode}: no step finished within {duration_s} s"}
    startup_s = report.get("duration_s", 0) - sum(r["step_time_s"] for r in records)
    step_s = statistics.median(timed)
    tp = report.get("throughput", {})
    return {"steps": len(records), "step_s": step_s, "startup_s": max(startup_s, 0.0),
            "tokens_per_step": records[-1]["tokens"], "throughput": tp,
            "main_job_steps": max(0.0, MAIN_JOB_S - max(startup_s, 0.0)) / step_s,
            "verdict": report.get("verdict", "?"), "exit": proc.returncode}


def percent(value):
    return "-" if value is None else f"{100 * value:.1f}%"


def row(label, res):
    if "error" in res:
        return f"| {label} | failed: {res['error'].splitlines()[-1] if res['error'] else ''} |||||||"
    mfu = res["throughput"].get("mfu", {})
    measured, datasheet = mfu.get("measured_peak") or {}, mfu.get("datasheet_peak") or {}
    goal = GOALS.get(label)
    goal_cell = "-" if goal is None else (
        f">= {100 * goal:.0f}% {'met' if measured.get('model', 0) >= goal else '**missed**'}")
    main_cell = f"{res['main_job_steps']:.0f}"
    if label == "small --stress all":
        main_cell += f" ({'met' if res['main_job_steps'] >= MAIN_JOB_STEPS_GOAL else '**missed**'} >= {MAIN_JOB_STEPS_GOAL})"
    return (f"| {label} | {res['tokens_per_step']} | {res['step_s']:.3f} | {res['throughput'].get('tokens_per_s', 0):.0f} "
            f"| {percent(measured.get('model'))} | {percent(measured.get('causal_useful'))} "
            f"| {percent(datasheet.get('model'))} | {goal_cell} | {main_cell} | {res['verdict']} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--binary", type=Path, required=True)
    parser.add_argument("--duration", type=int, default=25, help="seconds per run (time-boxed)")
    parser.add_argument("--warmup", type=int, default=3, help="leading steps left out of the step time")
    parser.add_argument("--only", default="", help="comma list of groups: base,alone,all,but (default all)")
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--device", choices=["gpu", "cpu"], default="gpu",
                        help="cpu: a dry run of this script's plumbing (with --presets smoke,smoke)")
    parser.add_argument("--presets", default="small,large", help="the small and the large preset")
    args = parser.parse_args()
    if args.device == "gpu" and not torch.cuda.is_available():
        sys.exit("mode_mfu: no GPU visible to torch")
    small, large = args.presets.split(",")
    groups = set(filter(None, args.only.split(","))) or {"base", "alone", "all", "but"}

    started = datetime.datetime.now(datetime.timezone.utc)
    peak_tflops = (measure_peak_gflops(torch.bfloat16, 1, size=8192, seconds=3.0, device="cuda") if args.device == "gpu"
                   else measure_peak_gflops(torch.bfloat16, torch.get_num_threads())) / 1e3
    runs_dir = args.output.parent / "mfu-runs"
    runs_dir.mkdir(parents=True, exist_ok=True)
    plan = []
    if "base" in groups:
        plan += [("small (no stress)", small, []), ("large (no stress)", large, [])]
    if "alone" in groups:
        plan += [(f"small --stress {m}", small, ["--stress", m]) for m in MODES]
    if "all" in groups:
        plan.append(("small --stress all", small, ["--stress", "all"]))
    if "but" in groups:
        plan += [(f"small, all but {m}", small, ["--stress", ",".join(x for x in MODES if x != m)]) for m in MODES]
    rows = [(label, run_cpp(args.binary, args.device, preset, extra, args.duration, args.warmup, peak_tflops,
                            runs_dir, label))
            for label, preset, extra in plan]

    device = (f"{torch.cuda.get_device_properties(0).name}, "
              f"{torch.cuda.get_device_properties(0).total_memory / 2**30:.0f} GiB" if args.device == "gpu"
              else f"CPU (a dry run: presets {args.presets})")
    lines = [
        "# rocm-conformance-llm on one GPU: MFU per stress mode, all, all but one",
        "",
        f"- date: {started:%Y-%m-%d %H:%M} UTC; written by `bench/mode_mfu.py` (via scripts/gpu/run.sh mfu)",
        f"- device: {device}; torch {torch.__version__}",
        f"- measured peak = best bf16 torch.mm: {peak_tflops:.4g} TFLOP/s; datasheet peak: the report's "
        "`throughput.mfu.datasheet_peak` (docs/performance.md)",
        f"- each run time-boxed to {args.duration} s, the first {args.warmup} steps left out of the step time; "
        "MFU columns: model FLOPs (attention's square) and useful causal FLOPs",
        f"- main job steps: ({MAIN_JOB_S} s - the run's start-up) / step time",
        "",
        "| run | tokens/step | step s | tokens/s | MFU measured (model) | MFU measured (causal) "
        "| MFU datasheet (model) | goal | 10-min main job steps | verdict |",
        "|---|---:|---:|---:|---:|---:|---:|---|---:|---|",
    ]
    lines += [row(label, res) for label, res in rows]
    text = "\n".join(lines) + "\n"
    args.output.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
