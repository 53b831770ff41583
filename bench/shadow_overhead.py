#!/usr/bin/python3
"""Step-time cost of the shadow check (diagnostics.shadow_check_interval=1 vs 0) on a preset.

Runs the binary alternately with the check on and off, `--pairs` times, same seed and shapes,
and summarises each run by its median step_time_s after `--skip` leading steps (the check
runs inside the step, so step_time_s carries its whole cost) and by the process's CPU time per
step (getrusage of the child: less sensitive than wall time to other processes on a shared
machine). The overhead of a pair is on/off - 1; the table gives every pair and their median.
Writes bench/shadow-overhead.md (--output). Run with /usr/bin/python3.
"""
import argparse
import datetime
import json
import os
import platform
import resource
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GOAL_PCT = 1.0


def run(binary, args, interval, steps, skip):
    with tempfile.TemporaryDirectory() as out:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.monotonic()
        subprocess.run([binary, *args, "--steps", str(steps), "--output-dir", out,
                        "--set", f"diagnostics.shadow_check_interval={interval}"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wall = time.monotonic() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        records = [json.loads(line) for line in open(Path(out) / "metrics.jsonl")]
        findings = json.load(open(Path(out) / "report.json"))["findings"]
    step_s = statistics.median(r["step_time_s"] for r in records[skip:])
    cpu = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) / steps
    shadow = sum(f["signature"] == "gemm_shadow_mismatch" for f in findings)
    return step_s, cpu, wall, shadow


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", default=str(REPO / "build" / "rocm-conformance-llm"))
    parser.add_argument("--preset", default="smoke")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--skip", type=int, default=5)
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--output", default=str(REPO / "bench" / "shadow-overhead.md"))
    a = parser.parse_args()
    args = ["--preset", a.preset, "--device", a.device, "--precision", a.precision,
            "--set", "num_threads=1", "--set", "eval_interval=0", "--seed", "1"]
    rows = []
    for i in range(a.pairs):
        # Alternate which goes first so a drift in machine load does not favour one side.
        order = (1, 0) if i % 2 == 0 else (0, 1)
        got = {interval: run(a.binary, args, interval, a.steps, a.skip) for interval in order}
        rows.append((got[1], got[0]))
    step_pct = [100 * (on[0] / off[0] - 1) for on, off in rows]
    cpu_pct = [100 * (on[1] / off[1] - 1) for on, off in rows]
    lines = [
        "# Shadow check overhead (generated)",
        "",
        "Written by `bench/shadow_overhead.py` (do not edit by hand: run it again).",
        "",
        f"- produced: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}",
        f"- machine: {os.cpu_count()} CPU core(s), {platform.processor() or platform.machine()}, "
        f"load average {os.getloadavg()[0]:.1f} at the end (other processes share these cores)",
        f"- runs: `{' '.join(args)} --steps {a.steps}`, `diagnostics.shadow_check_interval` 1 vs 0, "
        f"{a.pairs} alternating pairs; median step_time_s of steps {a.skip + 1}..{a.steps}",
        "",
        "| pair | step on (ms) | step off (ms) | step overhead | CPU/step on (ms) | CPU/step off (ms) | CPU overhead | shadow findings |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for i, ((on, off), s, c) in enumerate(zip(rows, step_pct, cpu_pct), 1):
        lines.append(f"| {i} | {1e3 * on[0]:.2f} | {1e3 * off[0]:.2f} | {s:+.2f}% | {1e3 * on[1]:.2f} | "
                     f"{1e3 * off[1]:.2f} | {c:+.2f}% | {on[3]} |")
    median_step, median_cpu = statistics.median(step_pct), statistics.median(cpu_pct)
    lines += ["", f"**Median overhead: {median_step:+.2f}% step time, {median_cpu:+.2f}% CPU time per step** "
              f"(goal <= {GOAL_PCT:.0f}%; CPU time includes start-up, which both sides share)."]
    text = "\n".join(lines) + "\n"
    print(text)
    Path(a.output).write_text(text)


if __name__ == "__main__":
    main()
