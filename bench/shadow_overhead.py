#!/usr/bin/python3
"""Step-time cost of the shadow check on a preset, measured inside each run.

Whole runs with the check on and off differ by +-10% on a shared 2-core host from process to
process alone (memory layout, frequency, neighbours), far more than the 1% to be measured. So
each run checks every 2nd step (diagnostics.shadow_check_interval=2), and its checked (even)
steps are compared with its unchecked (odd) steps: same process, same minute. The overhead of
one check is median(even) / median(odd) - 1, which is the overhead of the default (a check every
step). Steps whose number ends in 0 or 5 are left out of both sides: periodic work (logs,
fingerprints, canaries every 10, 50, 100 steps) would land on even steps only. Control runs with
the check off (interval 0) split the same way show the split's remaining bias, which should be
~0; the spread of the control across runs is this host's resolution. Writes bench/shadow-overhead.md (--output).
Run with /usr/bin/python3.
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GOAL_PCT = 1.0


def run(binary, args, interval, steps, skip):
    """Median step_time_s of the even and the odd steps after `skip`, and the shadow findings."""
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([binary, *args, "--steps", str(steps), "--output-dir", out,
                        "--set", f"diagnostics.shadow_check_interval={interval}"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        records = [json.loads(line) for line in open(Path(out) / "metrics.jsonl")]
        findings = json.load(open(Path(out) / "report.json"))["findings"]
    kept = [r for r in records if r["step"] > skip and r["step"] % 5 != 0]
    even = statistics.median(r["step_time_s"] for r in kept if r["step"] % 2 == 0)
    odd = statistics.median(r["step_time_s"] for r in kept if r["step"] % 2 == 1)
    shadow = sum(f["signature"] == "gemm_shadow_mismatch" for f in findings)
    return even, odd, shadow


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", default=str(REPO / "build" / "rocm-conformance-llm"))
    parser.add_argument("--preset", default="smoke")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--skip", type=int, default=10)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--output", default=str(REPO / "bench" / "shadow-overhead.md"))
    a = parser.parse_args()
    args = ["--preset", a.preset, "--device", a.device, "--precision", a.precision,
            "--set", "num_threads=1", "--set", "eval_interval=0", "--seed", "1"]
    rows = []
    for _ in range(a.runs):
        rows.append((run(a.binary, args, 2, a.steps, a.skip), run(a.binary, args, 0, a.steps, a.skip)))
    overhead = [100 * (on[0] / on[1] - 1) for on, _ in rows]
    bias = [100 * (off[0] / off[1] - 1) for _, off in rows]
    lines = [
        "# Shadow check overhead (generated)",
        "",
        "Written by `bench/shadow_overhead.py` (do not edit by hand: run it again); its docstring",
        "gives the method: checked against unchecked steps inside one run.",
        "",
        f"- produced: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}",
        f"- machine: {os.cpu_count()} CPU core(s), {platform.processor() or platform.machine()}, "
        f"load average {os.getloadavg()[0]:.1f} at the end (other processes share these cores)",
        f"- runs: `{' '.join(args)} --steps {a.steps}`; median step_time_s of the even and of the odd "
        f"steps after step {a.skip}; check runs `diagnostics.shadow_check_interval=2` (even steps "
        f"checked), control runs `=0`",
        "",
        "| run | checked steps (ms) | unchecked steps (ms) | overhead of a check | control: even (ms) | "
        "control: odd (ms) | control bias | shadow findings |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for i, ((on, off), o, b) in enumerate(zip(rows, overhead, bias), 1):
        lines.append(f"| {i} | {1e3 * on[0]:.2f} | {1e3 * on[1]:.2f} | {o:+.2f}% | {1e3 * off[0]:.2f} | "
                     f"{1e3 * off[1]:.2f} | {b:+.2f}% | {on[2]} |")
    median_overhead, median_bias = statistics.median(overhead), statistics.median(bias)
    verdict = "met" if median_overhead <= GOAL_PCT else "missed"
    lines += ["", f"**Median overhead of a check: {median_overhead:+.2f}% step time** (goal <= "
              f"{GOAL_PCT:.0f}% per step at the default of a check every step: **{verdict}**). Control: median "
              f"bias {median_bias:+.2f}%, from {min(bias):+.2f}% to {max(bias):+.2f}% across runs: "
              f"differences smaller than that spread are below this host's resolution."]
    text = "\n".join(lines) + "\n"
    print(text)
    Path(a.output).write_text(text)


if __name__ == "__main__":
    main()
