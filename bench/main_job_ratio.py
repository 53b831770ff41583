#!/usr/bin/env python3
"""The README's main job against the unstressed smoke step, on one machine in one run.

    /usr/bin/python3 bench/main_job_ratio.py --record      # measure; write this CPU kind's row
    /usr/bin/python3 bench/main_job_ratio.py --check       # the test command's guard (ctest main_job_ratio)

Runs the unstressed smoke preset (`--steps 40`) and the main job (`--stress all --steps 40
--duration 10m`, the README's command) alternately, `--repeats` times each, and takes each
side's least disturbed run (the lowest median step time after the warm-up steps). The ratio of
the two medians is a property of the binary on this kind of CPU, not of the machine's speed: a
faster or slower host of the same kind moves both. The records are kept per CPU kind (its
instruction sets, bench/machine.py, and the libtorch major.minor) in bench/main-job-ratio.json,
and bench/main-job-ratio.md tabulates them with the machine, date and load that measured them.

--check fails (exit 1) when this run's ratio exceeds FACTOR (5) times the one recorded for this
kind: a change that makes the main job ten times slower cannot land unseen. With no record for
this kind it records one (in --write-missing, default the records file) and passes, saying so.
--slow-main-tenfold injects `--inject slow-step=SECONDS` into the main job, SECONDS sized from
this run's smoke step and the record so that a main step takes ten times the recorded ratio:
the test that shows the guard firing.
"""
import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))
from machine import CONTENDED, instruction_sets, machine_line, others_busy_while, wait_until_quiet  # noqa: E402

RECORDS = BENCH_DIR / "main-job-ratio.json"
TABLE = BENCH_DIR / "main-job-ratio.md"
MAIN_JOB = ["--stress", "all", "--duration", "10m"]  # README.md's command, with --steps 40
WARMUP_STEPS = 5  # the first steps build caches and the rng mode's replay snapshot
FACTOR = 5.0


def run(binary, args, workdir, tag):
    out = Path(workdir) / tag
    cmd = [binary, *args, "--output-dir", str(out), "--overwrite"]
    start = time.time()
    proc, busy = others_busy_while(lambda: subprocess.run(cmd, capture_output=True, text=True))
    wall = time.time() - start
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    steps = [json.loads(line) for line in open(out / "metrics.jsonl")]
    times = [s["step_time_s"] for s in steps if s.get("step", 0) > WARMUP_STEPS]
    config = json.loads((out / "config.json").read_text())
    return {"median_s": statistics.median(times), "wall_s": wall, "busy": busy, "steps": len(steps),
            "libtorch": config["environment"].get("libtorch_version", "unknown"),
            "gemm": config.get("reduced_precision_gemm", {})}


def kind_of(libtorch):
    major_minor = ".".join(libtorch.split(".")[:2])
    return f"{'+'.join(instruction_sets()) or 'unknown'}; libtorch {major_minor}"


def measure(args, slow_s=0.0):
    smoke, main = [], []
    steps = ["--steps", str(args.steps)]
    with tempfile.TemporaryDirectory() as workdir:
        for i in range(args.repeats):
            smoke.append(run(args.binary, steps, workdir, f"smoke{i}"))
            extra = ["--inject", f"slow-step={slow_s:.3f}"] if slow_s > 0 else []
            main.append(run(args.binary, MAIN_JOB + steps + extra, workdir, f"main{i}"))
    best_smoke, best_main = min(smoke, key=lambda r: r["median_s"]), min(main, key=lambda r: r["median_s"])
    return {"smoke_step_ms": 1000 * best_smoke["median_s"], "main_step_ms": 1000 * best_main["median_s"],
            "ratio": best_main["median_s"] / best_smoke["median_s"],
            "main_job_wall_s": min(r["wall_s"] for r in main),
            "others_cpu": max(r["busy"] for r in smoke + main), "libtorch": best_main["libtorch"],
            "gemm_path": best_main["gemm"].get("path", "?"), "gemm_why": best_main["gemm"].get("why", "")}


def load(path):
    return json.loads(Path(path).read_text()) if Path(path).exists() else {}


def save(path, records):
    Path(path).write_text(json.dumps(records, indent=2, sort_keys=True) + "\n")


def render(records):
    lines = ["# The main job's step against the unstressed smoke step, per CPU kind", "",
             "Written by `bench/main_job_ratio.py --record` (the numbers behind it: "
             "bench/main-job-ratio.json); the test command fails when a run's ratio exceeds "
             f"{FACTOR:g}x its kind's row (ctest `binary.MainJobRatio.*`). Step times are medians after "
             f"{WARMUP_STEPS} warm-up steps of the least disturbed of the runs; the main job's wall time "
             "includes start-up and its 40 steps.", "",
             "| CPU kind | machine | smoke step ms | main job step ms | ratio | main job wall s | "
             "bf16 GEMMs | others' CPU |", "|---|---|---:|---:|---:|---:|---|---:|"]
    for kind, r in sorted(records.items()):
        busy = f"{100 * r['others_cpu']:.0f}%" + (" (contended)" if r["others_cpu"] > CONTENDED else "")
        lines.append(f"| {kind} | {r['machine']} | {r['smoke_step_ms']:.1f} | {r['main_step_ms']:.1f} | "
                     f"{r['ratio']:.1f}x | {r['main_job_wall_s']:.1f} | {r['gemm_path']} ({r['gemm_why']}) | "
                     f"{busy} |")
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--binary", default=str(BENCH_DIR.parent / "build" / "rocm-conformance-llm"))
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--steps", type=int, default=40, help="of both runs (the README's 40; the slowed test's fewer)")
    p.add_argument("--records", default=str(RECORDS))
    p.add_argument("--table", default=str(TABLE))
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--record", action="store_true", help="measure and write this kind's record and the table")
    mode.add_argument("--check", action="store_true", help="fail when the ratio exceeds FACTOR x the record")
    p.add_argument("--note", default="", help="--record: how the machine was posed (kept in the row)")
    p.add_argument("--wait-quiet", type=float, default=120.0, help="--record: seconds to wait for an idle machine")
    p.add_argument("--write-missing", help="--check: where a kind without a record is recorded (default --records)")
    p.add_argument("--slow-main-tenfold", action="store_true", help="--check: the guard's own test")
    args = p.parse_args()

    records = load(args.records)
    if args.write_missing and Path(args.write_missing).exists():
        records.update(load(args.write_missing))
    slow_s = 0.0
    if args.record:
        wait_until_quiet(args.wait_quiet)
    if args.slow_main_tenfold:
        # Sized from a smoke run here and this kind's record: every main step 10x the recorded ratio.
        with tempfile.TemporaryDirectory() as workdir:
            smoke = run(args.binary, ["--steps", str(args.steps)], workdir, "probe")
        recorded = records.get(kind_of(smoke["libtorch"]))
        if not recorded:
            sys.exit(f"no record for {kind_of(smoke['libtorch'])} to slow the main job against (run --check first)")
        slow_s = 9.0 * recorded["ratio"] * smoke["median_s"]
    m = measure(args, slow_s)
    kind = kind_of(m["libtorch"])
    m["machine"] = machine_line(m["libtorch"])
    print(f"{kind}: smoke step {m['smoke_step_ms']:.1f} ms, main job step {m['main_step_ms']:.1f} ms, "
          f"ratio {m['ratio']:.1f}x, main job {m['main_job_wall_s']:.1f} s wall; bf16 GEMMs {m['gemm_path']} "
          f"({m['gemm_why']}); others' CPU {100 * m['others_cpu']:.0f}%"
          + (f"; every main step slowed by {slow_s:.3f} s" if slow_s else ""))
    if args.record and args.steps != 40:
        sys.exit("--record measures the README's 40 steps")
    if args.record:
        if args.note:
            m["machine"] += f"; {args.note}"
            kind += f" ({args.note})"
        records[kind] = m
        save(args.records, records)
        Path(args.table).write_text(render(records))
        print(f"recorded in {args.records} and {args.table}")
        return 0
    recorded = records.get(kind)
    if not recorded:
        target = args.write_missing or args.records
        save(target, {**load(target), kind: m})
        print(f"no record for this CPU kind ({kind}): recorded this run's ratio in {target}; passing")
        return 0
    limit = FACTOR * recorded["ratio"]
    if m["ratio"] > limit:
        print(f"FAIL: the main job step ratio {m['ratio']:.1f}x exceeds {FACTOR:g}x the one recorded for {kind} "
              f"({recorded['ratio']:.1f}x on {recorded['machine']}): limit {limit:.1f}x")
        return 1
    print(f"ok: ratio {m['ratio']:.1f}x within {FACTOR:g}x the recorded {recorded['ratio']:.1f}x ({kind})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
