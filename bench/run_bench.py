#!/usr/bin/python3
"""Throughput of the C++ trainer against its Python peer, MFU, and the detectors' overhead.

For each (preset, precision) the C++ binary and bench/python_peer.py train the same model with
the same shapes and thread count, alternately, `--repeats` times. Leading steps are discarded
and each run is summarised by its median tokens/s. Across runs the table gives the best run
(the one least disturbed by other processes: on 2 shared cores a single competing compiler
slows a 2-thread run several-fold) and the median run. MFU = flops_per_token * tokens/s /
peak, peak = the best GFLOP/s of a 2048^3 torch.mm in that precision and thread count.

Detector overhead: the C++ smoke run with diagnostics on vs off. Some checks run inside the
trainer's step timer (op fingerprint), others after it (GEMM canary, detectors as observers),
so besides step_time_s the driver measures wall time per step from the console log's
timestamps. Thread-contention stalls are left out of both means (see stall_trimmed_mean).

Every run also records how much CPU other processes used while it ran (/proc/stat minus this
run's own CPU time), so a reader can tell a quiet measurement from a contended one.
Writes a markdown report to stdout and bench/results.md (--output); bench/results-tuned-env.md
is the same benchmark with TUNED_ENV_HINT exported (docs/performance.md). Run with
/usr/bin/python3.
"""
import argparse
import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
sys.path.insert(0, str(BENCH_DIR))
from machine import CONTENDED, instruction_sets, others_busy_while, wait_until_quiet  # noqa: E402,F401
from python_peer import measure_peak_gflops  # noqa: E402

# (steps, leading steps discarded) per preset: long enough for a stable median, short enough
# that the whole benchmark stays within ~10 minutes on 2 cores.
RUN_LENGTH = {"smoke": (40, 5), "cpu-medium": (16, 3)}
GOALS = {"smoke": 1.2, "cpu-medium": 1.0}  # minimum C++/Python tokens/s ratio
OVERHEAD_GOAL_PCT = 3.0
# Covers the periodic checks at their default intervals (op fingerprint every 50 steps, GEMM
# canary every 100) with a step after the canary, whose console line carries the canary's time.
OVERHEAD_STEPS = 110
STALL_FACTOR = 3.0
# What the C++ binary does to its own process (CMakeLists.txt, platform/device.cpp) and the
# Python peer does not: it loads OpenBLAS's OpenMP build, whose GEMMs run on libtorch's own
# threads (Debian's default pthreads build keeps a pool that spins against libtorch's: the binary
# would run it on one thread), and keeps glibc from returning the heap top to the OS after every
# step, which re-faults the activations (docs/performance.md). Exporting these variables gives
# the Python peer the same settings (the control run in bench/results-tuned-env.md).
TUNED_ENV_HINT = ("LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp "
                  "GLIBC_TUNABLES=glibc.malloc.trim_threshold=268435456:glibc.malloc.mmap_threshold=33554432")
# Environment that changes CPU threading, the BLAS or allocation under both implementations.
THREADING_ENV = ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OPENBLAS_NUM_THREADS",
                 "LD_LIBRARY_PATH", "GLIBC_TUNABLES")
# Console step lines: "HH:MM:SS.mmm info step    12 | loss ..." (utils/logging.cpp pattern).
LOG_STEP = re.compile(r"^(\d\d):(\d\d):(\d\d)\.(\d{3}) .*?\bstep\s+(\d+) \|")
LOG_MODEL = re.compile(r"model: (\d+) parameters, ([\d.e+]+) training FLOPs/token")


def cpp_command(args, preset, precision, extra=(), steps=None):
    return [str(args.binary), "--preset", preset, "--precision", precision, "--device", "cpu",
            "--steps", str(steps or RUN_LENGTH[preset][0]), "--set", "eval_interval=0",
            "--set", f"num_threads={args.threads}", *extra]


def resolved_config(args, preset, precision, workdir):
    """The C++ tool's own resolved config, so the Python peer trains exactly its shapes."""
    out = subprocess.run(cpp_command(args, preset, precision, ["--print-config"]),
                         check=True, capture_output=True, text=True).stdout
    path = Path(workdir) / f"{preset}-{precision}.json"
    path.write_text(out)
    return path, json.loads(out)["training"]


def step_wall_times(log_text):
    """{step: seconds between its console line and the previous step's}, from the timestamps.

    Step N's line is printed after step N+1 has run (the trainer publishes one step late), so
    each interval holds one step's work plus everything done between steps (observers, logs)."""
    stamps, previous, day = {}, None, 0.0
    for line in log_text.splitlines():
        m = LOG_STEP.match(line)
        if not m:
            continue
        hours, minutes, seconds, millis, step = (int(g) for g in m.groups())
        stamp = day + hours * 3600 + minutes * 60 + seconds + millis / 1e3
        if previous is not None and stamp < previous:  # the run crossed midnight
            day += 86400.0
            stamp += 86400.0
        previous = stamp
        stamps.setdefault(step, stamp)
    return {s: stamps[s] - stamps[s - 1] for s in stamps if s - 1 in stamps}


def run_cpp(args, preset, precision, workdir, tag, extra=(), steps=None):
    warmup = RUN_LENGTH[preset][1]
    out_dir = Path(tempfile.mkdtemp(prefix=f"{preset}-{precision}-{tag}-", dir=workdir))
    cmd = cpp_command(args, preset, precision, ["--output-dir", str(out_dir), "--overwrite", *extra], steps)
    proc, busy = others_busy_while(lambda: subprocess.run(cmd, capture_output=True, text=True))
    log = proc.stdout + proc.stderr
    if proc.returncode != 0:
        sys.exit(f"C++ run failed ({proc.returncode}): {' '.join(cmd)}\n{log[-3000:]}")
    records = [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines() if line]
    timed = [r for r in records if r["step"] > warmup]
    walls = step_wall_times(log)
    model = LOG_MODEL.search(log)
    config = json.loads((out_dir / "config.json").read_text())
    return {
        "tokens_per_s": statistics.median(r["tokens_per_s"] for r in timed),
        "step_time_by_step": {r["step"]: r["step_time_s"] for r in timed},
        "wall_by_step": {s: w for s, w in walls.items() if s > warmup + 1},
        "diagnostics": config.get("diagnostics", {}),
        "parameters": int(model.group(1)) if model else None,
        "flops_per_token": float(model.group(2)) if model else None,
        "environment": config.get("environment", {}),
        "others_busy": busy,
    }


def run_python(args, preset, config_path, peak):
    cmd = [sys.executable, str(BENCH_DIR / "python_peer.py"), "--config", str(config_path),
           "--warmup", str(RUN_LENGTH[preset][1]), "--threads", str(args.threads),
           "--peak-gflops", str(peak)]
    proc, busy = others_busy_while(lambda: subprocess.run(cmd, capture_output=True, text=True))
    if proc.returncode != 0:
        sys.exit(f"Python peer failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["others_busy"] = busy
    return result


def summarise(runs):
    """Best run (highest tokens/s), median run, and the contention the best run saw."""
    best = max(runs, key=lambda r: r["tokens_per_s"])
    return {"best": best["tokens_per_s"], "median": statistics.median(r["tokens_per_s"] for r in runs),
            "best_busy": best["others_busy"]}


def compare(args, preset, precision, peaks, workdir):
    """Alternating C++ and Python runs of one (preset, precision); one table row."""
    config_path, training = resolved_config(args, preset, precision, workdir)
    cpp_runs, py_runs = [], []
    for rep in range(args.repeats):
        # Alternate who goes first so drifting machine load hits both sides alike.
        for impl in (("cpp", "py") if rep % 2 == 0 else ("py", "cpp")):
            if impl == "cpp":
                cpp_runs.append(run_cpp(args, preset, precision, workdir, f"r{rep}"))
            else:
                py_runs.append(run_python(args, preset, config_path, peaks[precision]))
    cpp, py = cpp_runs[0], py_runs[0]
    if cpp["parameters"] != py["parameters"]:
        sys.exit(f"{preset}: C++ logs {cpp['parameters']} parameters, the Python peer has "
                 f"{py['parameters']}: python_peer.py no longer matches model.cpp")
    row = {"preset": preset, "precision": precision, "training": training,
           "parameters": py["parameters"], "fpt": cpp["flops_per_token"] or py["flops_per_token"],
           "cpp": summarise(cpp_runs), "py": summarise(py_runs), "goal": GOALS.get(preset, 1.0),
           "environment": cpp["environment"]}
    row["ratio"] = row["cpp"]["best"] / row["py"]["best"]
    row["median_ratio"] = row["cpp"]["median"] / row["py"]["median"]
    for side in ("cpp", "py"):
        row[side]["mfu"] = row["fpt"] * row[side]["best"] / (peaks[precision] * 1e9)
    print(f"# {preset} {precision}: C++ {row['cpp']['best']:.0f} tok/s, Python {row['py']['best']:.0f} "
          f"tok/s (best runs)", file=sys.stderr)
    return row


def stall_trimmed_mean(values):
    """(mean without stalls, stalls dropped): a stall is > STALL_FACTOR x the median.

    Periodic checks (op fingerprint, GEMM canary) cost well under that and stay in the mean; what
    is dropped are multi-timeslice stalls (another process taking a core from a 2-thread run),
    which would otherwise swamp a 3% effect."""
    limit = STALL_FACTOR * statistics.median(values)
    kept = [v for v in values if v <= limit]
    return statistics.mean(kept), len(values) - len(kept)


def within_run_costs(run):
    """Detector costs read off one run's own steps, immune to run-to-run noise.

    Returns seconds per step: (base step time, amortised extra time of the op-fingerprint steps,
    mean time between steps). Step N's console line follows step N+1's work, so the time
    between steps is the wall interval of line N minus step N+1's own step time; it holds the
    observers, logging and the GEMM canary. Intervals holding a stall are left out."""
    step_time, wall = run["step_time_by_step"], run["wall_by_step"]
    interval = run["diagnostics"].get("fingerprint_interval", 0) if run["diagnostics"].get("enabled") else 0
    fingerprinted = [s for s in step_time if interval > 0 and s % interval == 0]
    base = statistics.median(t for s, t in step_time.items() if s not in fingerprinted)
    fingerprint = sum(step_time[s] - base for s in fingerprinted) / len(step_time)
    limit = STALL_FACTOR * statistics.median(wall.values())
    between = [wall[s] - step_time[s + 1] for s in wall if s + 1 in step_time and wall[s] <= limit]
    return base, fingerprint, statistics.mean(between)


def detector_overhead(args, workdir):
    """Smoke fp32 with diagnostics on and off, alternating: the A/B figures and the attribution."""
    runs = {"on": [], "off": []}
    for rep in range(args.overhead_repeats):
        for state in (("on", "off") if rep % 2 == 0 else ("off", "on")):
            extra = () if state == "on" else ("--set", "diagnostics.enabled=false")
            runs[state].append(run_cpp(args, "smoke", "fp32", workdir, f"diag-{state}{rep}", extra,
                                       steps=OVERHEAD_STEPS))
    out = {"busy": [r["others_busy"] for state in runs for r in runs[state]]}
    for state in ("on", "off"):
        series = {"step_times_s": [list(r["step_time_by_step"].values()) for r in runs[state]],
                  "walls_s": [list(r["wall_by_step"].values()) for r in runs[state]]}
        for key, per_run in series.items():
            trimmed = [stall_trimmed_mean(values) for values in per_run]
            means = [mean for mean, _ in trimmed]
            out[key, state] = (min(means), statistics.median(means), sum(d for _, d in trimmed),
                               sum(len(values) for values in per_run))
        costs = [within_run_costs(r) for r in runs[state]]
        out["costs", state] = tuple(statistics.median(c[i] for c in costs) for i in range(3))
    out["diagnostics"] = runs["on"][0]["diagnostics"]
    return out


def machine_facts(env):
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                if line.startswith("model name")), platform.processor())
    isa = instruction_sets()
    return {
        "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M %Z").strip(),
        "nproc": os.cpu_count(),
        "cpu": f"{cpu} ({', '.join(isa)})",
        "libtorch": env.get("libtorch_version", "unknown"),
        "python_torch": torch.__version__,
        "blas": env.get("blas", "unknown"),
        "cpp_threads": env.get("intra_op_threads", "unknown"),
        "cpp_blas_threads": env.get("blas_threads", "unknown"),
        "cpp_blas_threading": env.get("blas_threading") or "unknown",
        "kernel": platform.release(),
        "env": ", ".join(f"{name}={os.environ.get(name, 'unset')}" for name in THREADING_ENV),
    }


def render(facts, args, peaks, rows, overhead, elapsed_s):
    busy = [r[side]["best_busy"] for r in rows for side in ("cpp", "py")] + overhead["busy"]
    lines = [
        "# rocm-conformance-llm CPU benchmark: C++ trainer vs Python peer",
        "",
        *([f"**{args.note}**", ""] if args.note else []),
        f"- date: {facts['date']}; `bench/run_bench.py` took {elapsed_s / 60:.1f} min",
        f"- machine: nproc {facts['nproc']}, CPU {facts['cpu']}, kernel {facts['kernel']}",
        f"- libtorch {facts['libtorch']} (C++) and torch {facts['python_torch']} (Python peer) load the same "
        f"shared libraries; BLAS: {facts['blas']} (fp32 GEMMs), oneDNN (bf16 GEMMs)",
        f"- threads: {args.threads} on both sides (`num_threads` / `torch.set_num_threads`; the C++ run "
        f"reported at::get_num_threads() = {facts['cpp_threads']})",
        f"- environment (both sides): {facts['env']}",
        f"- the C++ binary itself runs OpenBLAS's {facts['cpp_blas_threading']} build (it reported "
        f"{facts['cpp_blas_threads']} BLAS thread(s); the pthreads build gets one, the OpenMP build shares "
        "libtorch's) and keeps glibc from trimming its heap every step (CMakeLists.txt, platform/device.cpp); "
        "the Python peer runs stock torch. "
        f"Same settings on both sides: export {TUNED_ENV_HINT}",
        f"- peak = best 2048³ `torch.mm` at {args.threads} threads in this environment: "
        f"fp32 {peaks['fp32']:.0f} GFLOP/s, "
        f"bf16 {peaks['bf16']:.0f} GFLOP/s",
        f"- CPU used by other processes during the runs reported: up to {max(busy):.0%}"
        + (" (**contended: treat the figures as noisy**)" if max(busy) > CONTENDED else " (quiet)"),
        "",
        f"## Throughput ({args.repeats} alternating runs per side; a run's figure is its median over "
        "steps after warm-up)",
        "",
        "| preset | precision | params | FLOPs/token | C++ tok/s best (median) | Python tok/s best (median) "
        "| C++/Python best (median) | goal | C++ MFU | Python MFU | others' CPU |",
        "|---|---|---:|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    for r in rows:
        t, cpp, py = r["training"], r["cpp"], r["py"]
        verdict = "met" if r["ratio"] >= r["goal"] else "**missed**"
        lines.append(
            f"| {r['preset']} (h{t['hidden_size']} L{t['num_layers']} B{t['batch_size']} T{t['seq_len']} "
            f"{t['position']}) | {r['precision']} | {r['parameters']:,} | {r['fpt'] / 1e6:.2f} M "
            f"| {cpp['best']:.0f} ({cpp['median']:.0f}) | {py['best']:.0f} ({py['median']:.0f}) "
            f"| {r['ratio']:.2f}x ({r['median_ratio']:.2f}x) | ≥ {r['goal']:.1f}x {verdict} "
            f"| {cpp['mfu']:.1%} | {py['mfu']:.1%} | {max(cpp['best_busy'], py['best_busy']):.0%} |")
    lines += [
        "",
        "Steps per run (discarded): " + ", ".join(f"{p} {s} ({w})" for p, (s, w) in RUN_LENGTH.items())
        + ". FLOPs/token: model.cpp `flops_per_token` = 6·N + 12·L·h·T as the C++ run logs it. MFU uses "
        "the best run. \"others' CPU\": share of the machine other processes used during the best runs.",
    ]

    def pct(key, pick):
        on, off = overhead[key, "on"][pick], overhead[key, "off"][pick]
        return 100 * (on - off) / off

    def cell(key, state):
        best, median, dropped, total = overhead[key, state]
        return f"{1e3 * median:.2f} ({1e3 * best:.2f}) [{dropped}/{total} stalls]"

    lines += [
        "",
        f"## Detector overhead (smoke, fp32, {OVERHEAD_STEPS} steps, {args.overhead_repeats} alternating runs "
        "per state)",
        "",
        f"Per run: mean ms per step after warm-up, leaving out stalls (steps over {STALL_FACTOR:g}x the run's "
        "median; counted in brackets). Shown: median run (best run). The goal is judged on the attribution "
        "below: between processes of one config, plain step time varies more than 3%.",
        "",
        "| measure | diagnostics on | diagnostics off | overhead median (best) |",
        "|---|---:|---:|---:|",
        f"| step_time_s, the trainer's own timer (includes the op fingerprint) | {cell('step_times_s', 'on')} "
        f"| {cell('step_times_s', 'off')} | {pct('step_times_s', 1):+.1f}% ({pct('step_times_s', 0):+.1f}%) |",
        f"| wall time per step from console timestamps (adds the GEMM canary and the observers) "
        f"| {cell('walls_s', 'on')} | {cell('walls_s', 'off')} "
        f"| {pct('walls_s', 1):+.1f}% ({pct('walls_s', 0):+.1f}%) |",
        "",
        f"Other processes used up to {max(overhead['busy']):.0%} of the machine during these runs.",
    ]
    base_on, fingerprint, between_on = overhead["costs", "on"]
    base_off, _, between_off = overhead["costs", "off"]
    # The shadow check runs inside every ordinary step, so ordinary steps carry a detector cost
    # too; the difference of their medians also carries process-to-process noise (a few %).
    in_step = base_on - base_off
    attributed = 100 * (in_step + fingerprint + between_on - between_off) / (base_off + between_off)
    diag = overhead["diagnostics"]
    lines += [
        "",
        "Attribution within each run (medians over runs), which does not depend on that variation:",
        "",
        "| cost, ms per step | diagnostics on | diagnostics off |",
        "|---|---:|---:|",
        f"| step time of ordinary steps (median) | {1e3 * base_on:.2f} | {1e3 * base_off:.2f} |",
        f"| checks inside every step (shadow check every {diag.get('shadow_check_interval')} step(s)): ordinary "
        f"steps on minus off, process-to-process noise included | {1e3 * in_step:.3f} | 0 |",
        f"| op-fingerprint steps' extra time, amortised (every {diag.get('fingerprint_interval')} steps) "
        f"| {1e3 * fingerprint:.3f} | 0 |",
        f"| time between steps: observers, logging, GEMM canary (every {diag.get('gemm_canary_interval')} steps) "
        f"| {1e3 * between_on:.3f} | {1e3 * between_off:.3f} |",
        f"| **detector overhead attributed** | **{attributed:+.1f}%** "
        f"({'met' if attributed < OVERHEAD_GOAL_PCT else '**missed**'}: goal < {OVERHEAD_GOAL_PCT:.0f}%) | |",
        "",
    ]
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--binary", type=Path, default=REPO / "build" / "rocm-conformance-llm")
    parser.add_argument("--threads", type=int, default=os.cpu_count(), help="intra-op threads, both sides")
    parser.add_argument("--repeats", type=int, default=3, help="alternating runs per implementation")
    parser.add_argument("--presets", default=",".join(RUN_LENGTH))
    parser.add_argument("--precisions", default="fp32,bf16")
    parser.add_argument("--overhead-repeats", type=int, default=8)
    parser.add_argument("--wait-quiet", type=float, default=120.0,
                        help="seconds to wait for an idle machine before starting")
    parser.add_argument("--output", type=Path, default=BENCH_DIR / "results.md")
    parser.add_argument("--note", default="", help="a line printed under the title (how it was measured)")
    args = parser.parse_args()
    if not args.binary.exists():
        sys.exit(f"no C++ binary at {args.binary}: build the rocm-conformance-llm target first")

    started = time.time()
    wait_until_quiet(args.wait_quiet)
    peaks = {"fp32": measure_peak_gflops(torch.float32, args.threads),
             "bf16": measure_peak_gflops(torch.bfloat16, args.threads)}
    with tempfile.TemporaryDirectory(prefix="rcl-bench-") as workdir:
        rows = [compare(args, preset, precision, peaks, workdir)
                for preset in args.presets.split(",") for precision in args.precisions.split(",")]
        overhead = detector_overhead(args, workdir)
    report = render(machine_facts(rows[0]["environment"]), args, peaks, rows, overhead, time.time() - started)
    print(report)
    args.output.write_text(report)


if __name__ == "__main__":
    main()
