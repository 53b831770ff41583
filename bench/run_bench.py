#!/usr/bin/python3
"""Throughput of the C++ trainer against its Python peer, MFU, and the detectors' overhead.

For each (preset, precision) the C++ binary and bench/python_peer.py train the same model with
the same shapes and thread count, alternately, `--repeats` times. Leading steps are discarded;
each run contributes its median tokens/s and the table shows the median over runs (and the
spread, so noise is visible). MFU = flops_per_token * tokens/s / peak, with peak = the best
GFLOP/s of a 2048^3 torch.mm in that precision at the same thread count on this machine.

Detector overhead: the C++ smoke run with diagnostics on vs off. Detectors observe each step
after its timer stopped, so besides step_time_s the driver measures wall time per step from
the console log's timestamps, which includes everything that runs between steps.

Writes a markdown report to stdout and bench/results.md. Run with /usr/bin/python3 on an idle
machine: on 2 cores, one competing process can slow a 2-thread run several-fold.
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
from python_peer import flops_per_token, measure_peak_gflops  # noqa: E402

# (steps, leading steps discarded) per preset: long enough for a stable median, short enough
# that the whole benchmark stays within ~10 minutes on 2 cores.
RUN_LENGTH = {"smoke": (40, 5), "cpu-medium": (16, 3)}
PRECISIONS = ("fp32", "bf16")
GOALS = {"smoke": 1.2, "cpu-medium": 1.0}  # minimum C++/Python tokens/s ratio
OVERHEAD_GOAL_PCT = 3.0
# Console step lines: "HH:MM:SS.mmm info step    12 | loss ..." (utils/logging.cpp pattern).
LOG_STEP = re.compile(r"^(\d\d):(\d\d):(\d\d)\.(\d{3}) .*?\bstep\s+(\d+) \|")
LOG_MODEL = re.compile(r"model: (\d+) parameters, ([\d.e+]+) training FLOPs/token")


def cpu_busy_fraction(seconds=1.0):
    """Share of all CPUs busy over `seconds` (from /proc/stat): is anyone else competing?"""
    def sample():
        fields = [int(v) for v in open("/proc/stat").readline().split()[1:]]
        idle = fields[3] + fields[4]  # idle + iowait
        return sum(fields), idle
    total0, idle0 = sample()
    time.sleep(seconds)
    total1, idle1 = sample()
    return 1.0 - (idle1 - idle0) / max(1, total1 - total0)


def wait_until_quiet(max_wait_s, threshold=0.15):
    """Waits (up to max_wait_s) for the machine to go idle; returns the last busy fraction."""
    deadline = time.time() + max_wait_s
    busy = cpu_busy_fraction()
    while busy > threshold and time.time() < deadline:
        busy = cpu_busy_fraction(2.0)
    return busy


def cpp_command(args, preset, precision, extra=()):
    return [str(args.binary), "--preset", preset, "--precision", precision, "--device", "cpu",
            "--set", "eval_interval=0", "--set", f"num_threads={args.threads}", *extra]


def resolved_config(args, preset, precision, workdir):
    """The C++ tool's own resolved config, so the Python peer trains exactly its shapes."""
    out = subprocess.run(cpp_command(args, preset, precision, ["--print-config"]),
                         check=True, capture_output=True, text=True).stdout
    path = Path(workdir) / f"{preset}-{precision}.json"
    path.write_text(out)
    return path, json.loads(out)["training"]


def wall_per_step(log_text, warmup):
    """Mean wall seconds per step after warm-up, from the console lines' timestamps."""
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
    steps = sorted(s for s in stamps if s > warmup)
    if len(steps) < 2:
        return None
    return (stamps[steps[-1]] - stamps[steps[0]]) / (steps[-1] - steps[0])


def run_cpp(args, preset, precision, workdir, tag, extra=()):
    steps, warmup = RUN_LENGTH[preset]
    out_dir = Path(tempfile.mkdtemp(prefix=f"{preset}-{precision}-{tag}-", dir=workdir))
    cmd = cpp_command(args, preset, precision, ["--steps", str(steps), "--output-dir", str(out_dir),
                                                "--overwrite", *extra])
    busy = cpu_busy_fraction(0.5)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    log = proc.stdout + proc.stderr
    if proc.returncode != 0:
        sys.exit(f"C++ run failed ({proc.returncode}): {' '.join(cmd)}\n{log[-3000:]}")
    records = [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines() if line]
    timed = [r for r in records if r["step"] > warmup]
    model = LOG_MODEL.search(log)
    env = json.loads((out_dir / "config.json").read_text()).get("environment", {})
    return {
        "tokens_per_s": statistics.median(r["tokens_per_s"] for r in timed),
        "step_time_s": statistics.median(r["step_time_s"] for r in timed),
        "wall_per_step_s": wall_per_step(log, warmup),
        "parameters": int(model.group(1)) if model else None,
        "flops_per_token": float(model.group(2)) if model else None,
        "last_loss": records[-1].get("loss"),
        "environment": env,
        "busy_before": busy,
    }


def run_python(args, preset, config_path, peak):
    steps, warmup = RUN_LENGTH[preset]
    cmd = [sys.executable, str(BENCH_DIR / "python_peer.py"), "--config", str(config_path),
           "--steps", str(steps), "--warmup", str(warmup), "--threads", str(args.threads),
           "--peak-gflops", str(peak)]
    busy = cpu_busy_fraction(0.5)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"Python peer failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["busy_before"] = busy
    return result


def spread(values, fmt):
    return f"{fmt.format(min(values))}–{fmt.format(max(values))}"


def machine_facts(env):
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                if line.startswith("model name")), platform.processor())
    flags = next((line for line in open("/proc/cpuinfo") if line.startswith("flags")), "")
    isa = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f" {f}" in flags]
    return {
        "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M %Z").strip(),
        "nproc": os.cpu_count(),
        "cpu": f"{cpu} ({', '.join(isa)})",
        "libtorch": env.get("libtorch_version", "unknown"),
        "python_torch": torch.__version__,
        "blas": env.get("blas", "unknown"),
        "cpp_threads": env.get("intra_op_threads", "unknown"),
        "kernel": platform.release(),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--binary", type=Path, default=REPO / "build" / "rocm-conformance-llm")
    parser.add_argument("--threads", type=int, default=os.cpu_count(), help="intra-op threads, both sides")
    parser.add_argument("--repeats", type=int, default=3, help="alternating runs per implementation")
    parser.add_argument("--presets", default="smoke,cpu-medium")
    parser.add_argument("--precisions", default=",".join(PRECISIONS))
    parser.add_argument("--overhead-repeats", type=int, default=5)
    parser.add_argument("--wait-quiet", type=float, default=120.0,
                        help="seconds to wait for an idle machine before starting")
    parser.add_argument("--output", type=Path, default=BENCH_DIR / "results.md")
    args = parser.parse_args()
    if not args.binary.exists():
        sys.exit(f"no C++ binary at {args.binary}: build the rocm-conformance-llm target first")

    started = time.time()
    busy_at_start = wait_until_quiet(args.wait_quiet)
    peaks = {"fp32": measure_peak_gflops(torch.float32, args.threads),
             "bf16": measure_peak_gflops(torch.bfloat16, args.threads)}
    workdir = tempfile.mkdtemp(prefix="rcl-bench-")
    rows, env, busy_samples = [], {}, [busy_at_start]

    for preset in args.presets.split(","):
        for precision in args.precisions.split(","):
            config_path, training = resolved_config(args, preset, precision, workdir)
            cpp_runs, py_runs = [], []
            for rep in range(args.repeats):
                # Alternate who goes first so slow drift in machine load hits both sides.
                order = ("cpp", "py") if rep % 2 == 0 else ("py", "cpp")
                for impl in order:
                    if impl == "cpp":
                        cpp_runs.append(run_cpp(args, preset, precision, workdir, f"r{rep}"))
                    else:
                        py_runs.append(run_python(args, preset, config_path, peaks[precision]))
            env = cpp_runs[0]["environment"] or env
            busy_samples += [r["busy_before"] for r in cpp_runs + py_runs]
            cpp_tps = statistics.median(r["tokens_per_s"] for r in cpp_runs)
            py_tps = statistics.median(r["tokens_per_s"] for r in py_runs)
            fpt = py_runs[0]["flops_per_token"]
            cpp_fpt = cpp_runs[0]["flops_per_token"]
            if cpp_runs[0]["parameters"] not in (None, py_runs[0]["parameters"]):
                sys.exit(f"{preset}: parameter counts differ: C++ {cpp_runs[0]['parameters']} vs "
                         f"Python {py_runs[0]['parameters']}; the peer no longer matches model.cpp")
            rows.append({
                "preset": preset, "precision": precision, "training": training,
                "cpp_tps": cpp_tps, "py_tps": py_tps, "ratio": cpp_tps / py_tps,
                "cpp_spread": spread([r["tokens_per_s"] for r in cpp_runs], "{:.0f}"),
                "py_spread": spread([r["tokens_per_s"] for r in py_runs], "{:.0f}"),
                "cpp_step_ms": 1e3 * statistics.median(r["step_time_s"] for r in cpp_runs),
                "py_step_ms": 1e3 * statistics.median(r["median_step_time_s"] for r in py_runs),
                "parameters": py_runs[0]["parameters"], "fpt": fpt, "cpp_fpt": cpp_fpt,
                "cpp_mfu": fpt * cpp_tps / (peaks[precision] * 1e9),
                "py_mfu": fpt * py_tps / (peaks[precision] * 1e9),
                "goal": GOALS.get(preset, 1.0),
            })
            print(f"# {preset} {precision}: C++ {cpp_tps:.0f} tok/s, Python {py_tps:.0f} tok/s", file=sys.stderr)

    # Detector overhead: smoke fp32, diagnostics on vs off, alternating.
    overhead = {"on": [], "off": []}
    for rep in range(args.overhead_repeats):
        for state in (("on", "off") if rep % 2 == 0 else ("off", "on")):
            extra = () if state == "on" else ("--set", "diagnostics.enabled=false")
            overhead[state].append(run_cpp(args, "smoke", "fp32", workdir, f"diag-{state}{rep}", extra))
    busy_samples += [r["busy_before"] for runs in overhead.values() for r in runs]

    def median_of(state, key):
        values = [r[key] for r in overhead[state] if r[key] is not None]
        return statistics.median(values) if values else None

    report = render(machine_facts(env), args, peaks, rows, overhead, median_of, busy_samples,
                    time.time() - started)
    print(report)
    args.output.write_text(report)


def render(facts, args, peaks, rows, overhead, median_of, busy_samples, elapsed_s):
    lines = [
        "# rocm-conformance-llm CPU benchmark: C++ trainer vs Python peer",
        "",
        f"- date: {facts['date']}; generated by `bench/run_bench.py` in {elapsed_s / 60:.1f} min",
        f"- machine: nproc {facts['nproc']}, CPU {facts['cpu']}, kernel {facts['kernel']}",
        f"- libtorch {facts['libtorch']} (C++), torch {facts['python_torch']} (Python peer, same "
        f"shared libraries), BLAS: {facts['blas']}",
        f"- threads: {args.threads} on both sides (`num_threads` / `torch.set_num_threads`; the C++ run "
        f"reported at::get_num_threads() = {facts['cpp_threads']})",
        f"- peak (best 2048³ `torch.mm`, {args.threads} threads): fp32 {peaks['fp32']:.0f} GFLOP/s, "
        f"bf16 {peaks['bf16']:.0f} GFLOP/s",
        f"- CPU busy before each run (other processes): median {statistics.median(busy_samples):.0%}, "
        f"max {max(busy_samples):.0%}" + ("  **machine was not idle: figures are pessimistic and noisy**"
                                          if max(busy_samples) > 0.25 else ""),
        "",
        "## Throughput (median tokens/s over runs; each run's median over steps after warm-up)",
        "",
        "| preset | precision | params | FLOPs/token | C++ tok/s (range) | Python tok/s (range) | C++/Python "
        "| goal | C++ step ms | Python step ms | C++ MFU | Python MFU |",
        "|---|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        steps, warmup = RUN_LENGTH[r["preset"]]
        t = r["training"]
        verdict = "met" if r["ratio"] >= r["goal"] else "**missed**"
        lines.append(
            f"| {r['preset']} (h{t['hidden_size']} L{t['num_layers']} B{t['batch_size']} T{t['seq_len']}) "
            f"| {r['precision']} | {r['parameters']:,} | {r['fpt'] / 1e6:.2f} M "
            f"| {r['cpp_tps']:.0f} ({r['cpp_spread']}) | {r['py_tps']:.0f} ({r['py_spread']}) "
            f"| {r['ratio']:.2f}x | ≥ {r['goal']:.1f}x {verdict} | {r['cpp_step_ms']:.1f} | {r['py_step_ms']:.1f} "
            f"| {r['cpp_mfu']:.1%} | {r['py_mfu']:.1%} |")
    lines += ["", f"Runs: {args.repeats} per implementation, alternating; steps (discarded) per run: "
              + ", ".join(f"{p} {s} ({w})" for p, (s, w) in RUN_LENGTH.items()) + ".",
              "FLOPs/token: model.cpp `flops_per_token` (6·N + 12·L·h·T); C++ logged "
              + ", ".join(f"{r['preset']} {r['cpp_fpt']:.3g}" for r in rows if r["precision"] == "fp32"
                          and r["cpp_fpt"]) + "."]

    on_step, off_step = median_of("on", "step_time_s"), median_of("off", "step_time_s")
    on_wall, off_wall = median_of("on", "wall_per_step_s"), median_of("off", "wall_per_step_s")

    def pct(on, off):
        return f"{100 * (on - off) / off:+.1f}%" if on and off else "n/a"

    def ms(value):
        return f"{1e3 * value:.2f}" if value else "n/a"

    wall_verdict = ""
    if on_wall and off_wall:
        wall_verdict = "met" if 100 * (on_wall - off_wall) / off_wall < OVERHEAD_GOAL_PCT else "**missed**"
    lines += [
        "",
        f"## Detector overhead (smoke, fp32, {args.overhead_repeats} runs each, alternating)",
        "",
        "| measure | diagnostics on | diagnostics off | overhead | goal |",
        "|---|---:|---:|---:|---|",
        f"| median step_time_s (ms, the trainer's own timer) | {ms(on_step)} | {ms(off_step)} "
        f"| {pct(on_step, off_step)} | |",
        f"| mean wall per step (ms, console timestamps, includes observers) | {ms(on_wall)} | {ms(off_wall)} "
        f"| {pct(on_wall, off_wall)} | < {OVERHEAD_GOAL_PCT:.0f}% {wall_verdict} |",
        "",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
