#!/usr/bin/env python3
"""The C++ trainer against the specification's own stack: Transformers + Accelerate + Datasets.

For each row (preset, Hugging Face layout, precision) the C++ binary trains on a text corpus and
bench/hf_peer.py trains the same model with Transformers + Accelerate + Datasets, with the run's
hyper-parameters, on the same token windows in the same order, from the same initial weights:
a one-step C++ run at a learning rate of 1e-30 exports them in a checkpoint (its `config.json`
picks the Hugging Face class; the step leaves every weight as it was, but zeros, which move by
at most 1e-30). Runs alternate, `--repeats` per side. Throughput: the median tokens/s over the
steps after warm-up of each run (the C++ trainer's step timer; the peer's wall time per
optimizer step), best and median run across repeats. Loss curves: the largest per-step
difference between the two sides' losses (the same arithmetic in another order: it should stay
at float rounding in fp32 and grow with bf16's), and the first row's curves every few steps.

The corpus is Debian's licence texts (/usr/share/common-licenses, one JSONL document per file,
symlinks skipped), present on every Debian machine. Every `--binary` given is measured (e.g.
the host lane's build on libtorch 1.13 and the wheel lane's on torch 2.11).

Run with the wheel lane's Python (it has transformers, accelerate and datasets):
    scripts/wheel_env.sh python bench/hf_bench.py --binary build/rocm-conformance-llm ...
Writes bench/results-hf.md (--output).
"""
import argparse
import datetime
import glob
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
sys.path.insert(0, str(BENCH_DIR))
from machine import CONTENDED, machine_line, others_busy_while, wait_until_quiet  # noqa: E402
from run_bench import THREADING_ENV  # noqa: E402

# (name, preset, --set overrides giving a Hugging Face layout, steps, warm-up steps)
# per --device: the rows, the minimum C++/HF tokens/s ratio, the default table
ROWS = {
    "cpu": [
        ("smoke, GPT-2 layout", "smoke", ["position=learned", "grad_accum_steps=2"], 40, 5),
        ("smoke, Llama layout", "smoke", ["norm=rmsnorm", "activation=swiglu", "grad_accum_steps=2"], 40, 5),
        ("cpu-medium, GPT-2 layout", "cpu-medium", [], 16, 3),
    ],
    "gpu": [
        ("small, GPT-2 layout", "small", ["attention_backend=sdpa"], 40, 10),
        ("small, Llama layout", "small", ["attention_backend=sdpa", "norm=rmsnorm", "activation=swiglu",
                                          "position=rotary"], 40, 10),
    ],
}
# minimum C++/HF tokens/s per precision: against the peer's own stack, on CPUs with and without native bf16
GOAL = {"cpu": {"fp32": 1.0, "bf16": 1.2}, "gpu": {"fp32": 1.2, "bf16": 1.2}}
TABLE = {"cpu": BENCH_DIR / "results-hf.md", "gpu": BENCH_DIR / "results-hf-gpu.md"}
CURVE_EVERY = 5


def corpus(workdir):
    path = Path(workdir) / "licenses.jsonl"
    with open(path, "w") as out:
        for name in sorted(glob.glob("/usr/share/common-licenses/*")):
            if not os.path.islink(name):
                out.write(json.dumps({"text": Path(name).read_text(errors="replace")}) + "\n")
    return path


def run_cpp(args, binary, row, precision, data, workdir, steps=None, extra=()):
    _, preset, sets, row_steps, warmup = row
    steps = steps or row_steps
    out = Path(tempfile.mkdtemp(prefix=f"{preset}-{precision}-cpp-", dir=workdir))
    cmd = [str(binary), "--preset", preset, "--precision", precision, "--device", args.device, "--steps", str(steps),
           "--data", str(data), "--output-dir", str(out), "--overwrite", "--checkpoint-interval", str(steps),
           "--set", "eval_interval=0", "--set", f"num_threads={args.threads}", *extra]
    for s in sets:
        cmd += ["--set", s]
    proc, busy = others_busy_while(lambda: subprocess.run(cmd, capture_output=True, text=True))
    if proc.returncode != 0:
        sys.exit(f"C++ run failed ({proc.returncode}): {' '.join(cmd)}\n{(proc.stdout + proc.stderr)[-3000:]}")
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line]
    config = json.loads((out / "config.json").read_text())
    return {"tokens_per_s": statistics.median(r["tokens_per_s"] for r in records if r["step"] > min(warmup, steps - 1)),
            "attention": config["training"]["attention_backend"],
            "gemm": config.get("reduced_precision_gemm", {}).get("path", "native"),
            "losses": [r["loss"] for r in records], "others_busy": busy, "run": out,
            "checkpoint": next((out / "checkpoints").iterdir()), "environment": config["environment"]}


def initial_weights(args, binary, row, precision, data, workdir):
    """A checkpoint of the C++ model as its seed initialises it (module docstring)."""
    return run_cpp(args, binary, row, precision, data, workdir, steps=1,
                   extra=("--set", "learning_rate=1e-30"))["checkpoint"]


def run_hf(args, row, init, cpp, data):
    _, _, _, steps, warmup = row
    cmd = [args.python, str(BENCH_DIR / "hf_peer.py"), "--checkpoint", str(init),
           "--run-config", str(cpp["run"] / "config.json"), "--data", str(data), "--threads", str(args.threads),
           "--steps", str(steps), "--warmup", str(warmup), "--device", "cpu" if args.device == "cpu" else "cuda"]
    proc, busy = others_busy_while(lambda: subprocess.run(cmd, capture_output=True, text=True))
    if proc.returncode != 0:
        sys.exit(f"HF peer failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["others_busy"] = busy
    return result


def compare(args, binary, row, precision, data, workdir):
    init = initial_weights(args, binary, row, precision, data, workdir)
    cpp_runs, hf_runs = [], []
    for rep in range(args.repeats):
        # Alternate who goes first so drifting machine load hits both sides alike; the peer reads
        # the first C++ run's config.json (its hyper-parameters), so that run goes first.
        for side in (("cpp", "hf") if rep % 2 == 0 else ("hf", "cpp")):
            if side == "cpp":
                cpp_runs.append(run_cpp(args, binary, row, precision, data, workdir))
            else:
                hf_runs.append(run_hf(args, row, init, cpp_runs[0], data))
    best = {side: max(runs, key=lambda r: r["tokens_per_s"]) for side, runs in (("cpp", cpp_runs), ("hf", hf_runs))}
    cpp_losses, hf_losses = cpp_runs[0]["losses"], hf_runs[0]["losses"]
    result = {
        "row": row[0], "precision": precision, "libtorch": cpp_runs[0]["environment"].get("libtorch_version", "?"),
        "attention": cpp_runs[0]["attention"], "gemm": cpp_runs[0]["gemm"],
        "model": hf_runs[0]["model"], "versions": hf_runs[0]["versions"],
        "cpp_best": best["cpp"]["tokens_per_s"], "hf_best": best["hf"]["tokens_per_s"],
        "cpp_median": statistics.median(r["tokens_per_s"] for r in cpp_runs),
        "hf_median": statistics.median(r["tokens_per_s"] for r in hf_runs),
        "busy": max(best["cpp"]["others_busy"], best["hf"]["others_busy"]),
        "cpp_losses": cpp_losses, "hf_losses": hf_losses,
        "max_loss_gap": max(abs(a - b) for a, b in zip(cpp_losses, hf_losses, strict=True)),
    }
    print(f"# {row[0]} {precision} (libtorch {result['libtorch']}): C++ {result['cpp_best']:.0f} tok/s, "
          f"HF {result['hf_best']:.0f} tok/s (best runs)", file=sys.stderr)
    return result


def render(results, args, elapsed_s, note):
    goal = GOAL[args.device]
    versions = results[0]["versions"]
    lines = [
        f"# rocm-conformance-llm vs Hugging Face Transformers + Accelerate + Datasets ({args.device.upper()})", "",
        f"- date: {datetime.datetime.now():%Y-%m-%d %H:%M}; `bench/hf_bench.py` took {elapsed_s / 60:.1f} min",
        *([f"- {note}"] if note else []),
        f"- machine: {machine_line(', '.join(sorted({r['libtorch'] for r in results})))}, kernel "
        f"{platform.release()}; {args.threads} threads on both sides",
        f"- peer: torch {versions['torch']}, transformers {versions['transformers']}, accelerate "
        f"{versions['accelerate']}, datasets {versions['datasets']} (bench/hf_peer.py: `from_config` on the "
        "exported config.json, Accelerate's mixed precision, accumulation and clipping, a Datasets pipeline of "
        "the same windows in the same order)",
        f"- data: Debian's licence texts as JSONL, byte tokens (docs/data.md); environment: "
        + ", ".join(f"{name}={os.environ.get(name, 'unset')}" for name in THREADING_ENV),
        f"- runs: {args.repeats} per side, alternating; tokens/s = a run's median over the steps after warm-up; "
        "goal: C++ >= " + ", ".join(f"{g}x in {p}" for p, g in goal.items()) + " the peer's tokens/s; "
        "C++ attention: the backend its default (`auto`) ran (the peer: HF's default, SDPA); GEMMs: `float32` where the "
        "C++ run computed its bf16 GEMMs in float32 (a CPU without a native bf16 kernel)", "",
        "| model (HF class) | precision | C++ libtorch | C++ attention, GEMMs | C++ tok/s best (median) "
        "| HF tok/s best (median) "
        "| C++/HF best (median) | goal | loss step 1 C++ / HF | mean loss last 10 C++ / HF | max per-step loss gap "
        "| others' CPU |",
        "|---|---|---|---|---:|---:|---:|---|---|---|---:|---:|",
    ]
    for r in results:
        ratio, median_ratio = r["cpp_best"] / r["hf_best"], r["cpp_median"] / r["hf_median"]
        tail = lambda losses: statistics.mean(losses[-10:])  # noqa: E731
        flag = " (contended)" if r["busy"] > CONTENDED else ""
        lines.append(
            f"| {r['row']} ({r['model']}) | {r['precision']} | {r['libtorch']} | {r['attention']}, {r['gemm']} "
            f"| {r['cpp_best']:.0f} ({r['cpp_median']:.0f}) | {r['hf_best']:.0f} ({r['hf_median']:.0f}) "
            f"| {ratio:.2f}x ({median_ratio:.2f}x) "
            f"| >= {goal[r['precision']]}x {'met' if ratio >= goal[r['precision']] else '**missed**'} | {r['cpp_losses'][0]:.4f} / "
            f"{r['hf_losses'][0]:.4f} | {tail(r['cpp_losses']):.4f} / {tail(r['hf_losses']):.4f} "
            f"| {r['max_loss_gap']:.3f} | {r['busy']:.0%}{flag} |")
    first = results[0]
    lines += ["", f"Loss curve of the first row's first runs ({first['row']}, {first['precision']}, "
              f"libtorch {first['libtorch']}), every {CURVE_EVERY} steps:", "",
              "| step | " + " | ".join(str(s) for s in range(1, len(first["cpp_losses"]) + 1, CURVE_EVERY)) + " |",
              "|---|" + "---:|" * len(range(1, len(first["cpp_losses"]) + 1, CURVE_EVERY))]
    for label, key in (("C++", "cpp_losses"), ("HF", "hf_losses")):
        lines.append(f"| {label} | " + " | ".join(f"{first[key][s - 1]:.3f}"
                                                 for s in range(1, len(first[key]) + 1, CURVE_EVERY)) + " |")
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--binary", type=Path, action="append", required=True,
                        help="a C++ build to measure (repeatable)")
    parser.add_argument("--python", default=sys.executable, help="the Python that runs hf_peer.py")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--precisions", default="fp32,bf16")
    parser.add_argument("--wait-quiet", type=float, default=120.0)
    parser.add_argument("--device", choices=sorted(ROWS), default="cpu",
                        help="cpu, or gpu (the peer's cuda: the HIP device on ROCm)")
    parser.add_argument("--output", type=Path, help="the table (default: bench/results-hf.md, -gpu.md on a GPU)")
    parser.add_argument("--note", default="", help="a line under the title (how it was measured)")
    args = parser.parse_args()
    args.output = args.output or TABLE[args.device]
    for binary in args.binary:
        if not binary.exists():
            sys.exit(f"no C++ binary at {binary}: build the rocm-conformance-llm target first")

    started = datetime.datetime.now().timestamp()
    wait_until_quiet(args.wait_quiet)
    with tempfile.TemporaryDirectory(prefix="rcl-hf-bench-") as workdir:
        data = corpus(workdir)
        results = [compare(args, binary, row, precision, data, workdir)
                   for binary in args.binary for row in ROWS[args.device] for precision in args.precisions.split(",")]
    report = render(results, args, datetime.datetime.now().timestamp() - started, args.note)
    print(report)
    args.output.write_text(report)


if __name__ == "__main__":
    main()
