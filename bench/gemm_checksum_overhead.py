#!/usr/bin/python3
"""Step-time cost of the checksum check (diagnostics.gemm_checksums) on presets, and its margin.

For each preset, rounds of three runs (off, rotating, all) of the same seed, interleaved so a
round shares the host's minute; a run's figure is its median step time after the warm-up. The
cost of a mode is the median over rounds of (mode / off - 1). Whole runs on a shared host differ
by several percent from process to process, so the spread over rounds is printed beside it: a
cost inside it is not resolved. Each run's report also says how many GEMM calls were judged and
the largest error over bound a clean one showed (the margin the bound keeps; a finding in these
clean runs would be a false alarm and is counted). Writes bench/gemm-checksum-overhead.md
(--output). Run with /usr/bin/python3; on a GPU: --device gpu --presets small,large.
"""
import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import machine_line  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
MODES = ("off", "rotating", "all")


def run(binary, args, mode, steps, skip):
    """Median step_time_s after `skip`, the report's gemm_checksums section, the mismatch findings."""
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([binary, *args, "--steps", str(steps), "--output-dir", out,
                        "--set", f"diagnostics.gemm_checksums={mode}"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        records = [json.loads(line) for line in open(Path(out) / "metrics.jsonl")]
        report = json.load(open(Path(out) / "report.json"))
    step_time = statistics.median(r["step_time_s"] for r in records if r.get("step", 0) > skip)
    found = sum(f["signature"] == "gemm_checksum_mismatch" for f in report["findings"])
    return step_time, report.get("gemm_checksums", {}), found


def measure(a, preset):
    args = ["--preset", preset, "--device", a.device, "--precision", a.precision,
            "--set", "eval_interval=0", "--seed", "1"]
    if a.device == "cpu":
        args += ["--set", "num_threads=1"]
    rounds = [{mode: run(a.binary, args, mode, a.steps, a.skip) for mode in MODES} for _ in range(a.runs)]
    rows = []
    for mode in MODES[1:]:
        cost = [100 * (r[mode][0] / r["off"][0] - 1) for r in rounds]
        sections = [r[mode][1] for r in rounds]
        rows.append({
            "preset": preset,
            "mode": mode,
            "off_ms": 1000 * statistics.median(r["off"][0] for r in rounds),
            "mode_ms": 1000 * statistics.median(r[mode][0] for r in rounds),
            "cost_pct": statistics.median(cost),
            "spread_pct": (min(cost), max(cost)),
            "calls_per_step": sections[0].get("calls_judged", 0) / a.steps,
            "distinct": sections[0].get("distinct_gemms", 0),
            "worst_clean": max(s.get("worst_clean_error_over_bound", 0.0) for s in sections),
            "false_alarms": sum(r[mode][2] for r in rounds),
        })
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", default=str(REPO / "build" / "rocm-conformance-llm"))
    parser.add_argument("--presets", default="smoke,cpu-medium")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--skip", type=int, default=10)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--output", default=str(REPO / "bench" / "gemm-checksum-overhead.md"))
    a = parser.parse_args()
    rows = [row for preset in a.presets.split(",") for row in measure(a, preset)]
    version_file = Path(a.binary).parent / "libtorch-version.txt"  # written by the build
    libtorch = version_file.read_text().strip() if version_file.exists() else "unknown"
    lines = [
        "# Checksum check: step-time cost and margin",
        "",
        f"Written by `bench/gemm_checksum_overhead.py` on {machine_line(libtorch)}, device {a.device}, {a.precision}, "
        f"{a.runs} rounds of {a.steps} steps (median after step {a.skip}); do not edit by hand.",
        "",
        "| preset | mode | step off (ms) | step with it (ms) | cost | spread over rounds | GEMM calls judged a step | distinct GEMMs | worst clean error / bound | false alarms |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['preset']} | {r['mode']} | {r['off_ms']:.1f} | {r['mode_ms']:.1f} | {r['cost_pct']:+.1f}% | "
            f"{r['spread_pct'][0]:+.1f}% .. {r['spread_pct'][1]:+.1f}% | {r['calls_per_step']:.1f} | {r['distinct']} | "
            f"{r['worst_clean']:.3g} | {r['false_alarms']} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if a.output != "-":
        Path(a.output).write_text(text)


if __name__ == "__main__":
    main()
