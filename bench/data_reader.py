#!/usr/bin/env python3
"""The indexed-dataset reader's time per step against the step's, and its tokens/s against numpy.

    /usr/bin/python3 bench/data_reader.py [--binary build/rocm-conformance-llm] [--device gpu]   # ~2-3 min on 2 cores

What it writes: synthetic Megatron indexed datasets (docs/data.md) in a temporary folder, with
numpy, each in documents of varied length (log-normal, 1 to 8,192 tokens), one sequence per
document, with a sidecar PREFIX.json naming the vocabulary: `gpt2`, `--tokens` uint16 ids below
50,257; `llama3`, `--other-tokens` int32 ids below 128,256 (Megatron's dtype for that vocabulary);
`wide`, `--other-tokens` uint16 ids below 512, only so that the LM head stays CPU-sized in the row
that reads the `small` preset's batch shape (8 windows of 1,025 tokens) with the smoke model: the
reader reads the same bytes whatever the ids are. The files are freshly written, so both readers
below read from the page cache, not the disk. `--rows` picks the rows (gpt2-cpu-medium is one more).

The C++ side: the binary trains on each row's dataset (`--device cpu|gpu --data PREFIX --preset P
--steps N --set phase_timing=true`, evaluation off), and each step's `phase_s.data` in
metrics.jsonl is what the trainer spent on its batches: for each of grad_accum_steps
micro-batches, `DataSource::train_batch` (the window order's lookups, the reads from the memory
map with the dtype widened to int64, and the batch tensors' allocation and slicing; on a GPU it
would also issue the host-to-device copy). Medians over the steps after `--warmup`: the data
phase's ms per step, its share of the step (`phase_s.data / step_time_s` per step), and the
reader's tokens/s (windows per step x (seq_len+1) tokens / data phase).

The numpy side: a `numpy.memmap` of the same PREFIX.bin does the same work per step (the same
number of windows of seq_len+1 tokens, at random window starts w*seq_len as the trainer's
shuffled order gives, gathered into one int64 array of shape [windows, seq_len+1]), timed with
`time.perf_counter` for `--numpy-steps` steps, two ways: row by row (`out[r] = mm[s:s+T+1]`, a
PyTorch-style dataset's __getitem__) and in one fancy-indexed gather
(`mm[starts[:, None] + arange(T+1)].astype(int64)`). Median tokens/s of each, and the ratio
C++ / numpy (row by row). Writes bench/data-reader.md (--output) with the machine line and the
other processes' CPU share during the C++ runs.
"""
import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
sys.path.insert(0, str(BENCH_DIR))
from machine import CONTENDED, machine_line, others_busy_while  # noqa: E402

DTYPES = {"uint16": (np.uint16, 8), "int32": (np.int32, 4)}  # numpy type, Megatron's dtype code
# name: (dtype, vocabulary). gpt2 and llama3 as Megatron's rule writes those vocabularies; wide has
# ids below 512 only so that its rows' LM head stays CPU-sized at long windows (the reader reads the
# same bytes whatever the ids are).
DATASETS = {"gpt2": ("uint16", 50_257), "llama3": ("int32", 128_256), "wide": ("uint16", 512)}
# row: (dataset, preset, extra flags)
ROWS = {"gpt2-smoke": ("gpt2", "smoke", []),
        "llama3-smoke": ("llama3", "smoke", []),
        "wide-small-shape": ("wide", "smoke", ["--set", "seq_len=1024", "--set", "batch_size=8"]),
        "gpt2-cpu-medium": ("gpt2", "cpu-medium", [])}
DEFAULT_ROWS = ("gpt2-smoke", "llama3-smoke", "wide-small-shape")


def write_dataset(prefix, tokens, vocab, dtype, seed):
    """PREFIX.bin/.idx/.json: `tokens` random ids below `vocab` in documents of varied length."""
    rng = np.random.default_rng(seed)
    np_type, code = DTYPES[dtype]
    lengths = []
    total = 0
    while total < tokens:
        chunk = np.clip(rng.lognormal(mean=6.0, sigma=1.2, size=100_000), 1, 8192).astype(np.int64)
        lengths.append(chunk)
        total += int(chunk.sum())
    lengths = np.concatenate(lengths)
    lengths = lengths[: int(np.searchsorted(np.cumsum(lengths), tokens)) + 1]
    lengths[-1] -= int(lengths.sum()) - tokens  # exactly `tokens`
    lengths = lengths[lengths > 0]
    ids = np.empty(tokens, dtype=np_type)
    step = 1 << 24
    for start in range(0, tokens, step):
        n = min(step, tokens - start)
        ids[start:start + n] = rng.integers(0, vocab, size=n, dtype=np.int64)
    ids.tofile(f"{prefix}.bin")
    docs = len(lengths)
    pointers = np.concatenate([[0], np.cumsum(lengths)[:-1]]) * np.dtype(np_type).itemsize
    with open(f"{prefix}.idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write(np.array([1], dtype="<u8").tobytes())
        f.write(np.array([code], dtype="<u1").tobytes())
        f.write(np.array([docs, docs + 1], dtype="<u8").tobytes())
        f.write(lengths.astype("<i4").tobytes())
        f.write(pointers.astype("<i8").tobytes())
        f.write(np.arange(docs + 1, dtype="<i8").tobytes())
    sidecar = {"vocab_size": vocab, "tokens": tokens, "documents": docs, "largest_id": int(ids.max()),
               "tokenizer": {"path": "synthetic (bench/data_reader.py)", "sha256": "0" * 64},
               "special_ids": {"eos": vocab - 1}, "dtype": dtype}
    Path(f"{prefix}.json").write_text(json.dumps(sidecar, indent=2) + "\n")
    return docs


def run_cpp(binary, device, prefix, preset, steps, warmup, extra, workdir, tag):
    out = Path(workdir) / tag
    cmd = [binary, "--device", device, "--data", prefix, "--preset", preset, "--steps", str(steps),
           "--set", "phase_timing=true", "--set", "eval_interval=0", *extra,
           "--output-dir", str(out), "--overwrite"]
    start = time.time()
    proc, busy = others_busy_while(lambda: subprocess.run(cmd, capture_output=True, text=True))
    wall = time.time() - start
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    config = json.loads((out / "config.json").read_text())
    train = config.get("training", config)
    batch, seq_len, accum = train["batch_size"], train["seq_len"], train["grad_accum_steps"]
    steps_rec = [s for s in map(json.loads, open(out / "metrics.jsonl")) if "phase_s" in s]
    first = next((s["phase_s"]["data"] for s in steps_rec if s.get("step") == 1), float("nan"))
    steps_rec = [s for s in steps_rec if s.get("step", 0) > warmup]
    if not steps_rec:
        sys.exit(f"{out}/metrics.jsonl: no step after {warmup} carries phase_s")
    windows = batch * accum
    read = windows * (seq_len + 1)
    data = [s["phase_s"]["data"] for s in steps_rec]
    step = [s["step_time_s"] for s in steps_rec]
    return {"batch": batch, "seq_len": seq_len, "accum": accum, "windows": windows, "read": read,
            "data_ms": 1000 * statistics.median(data), "first_ms": 1000 * first, "step_ms": 1000 * statistics.median(step),
            "share": statistics.median(d / t for d, t in zip(data, step)),
            "tok_s": statistics.median(read / d for d in data), "samples": len(data), "wall_s": wall,
            "busy": busy, "libtorch": config.get("environment", {}).get("libtorch_version", "unknown"),
            "threads": train.get("num_threads")}


def run_numpy(prefix, dtype, windows, seq_len, steps, seed):
    mm = np.memmap(f"{prefix}.bin", dtype=DTYPES[dtype][0], mode="r")
    n_windows = (len(mm) - 1) // seq_len
    width = seq_len + 1
    rng = np.random.default_rng(seed)
    offsets = np.arange(width, dtype=np.int64)
    rows, gather = [], []
    for _ in range(steps):
        starts = rng.integers(0, n_windows, size=windows, dtype=np.int64) * seq_len
        t0 = time.perf_counter()
        out = np.empty((windows, width), dtype=np.int64)
        for r, s in enumerate(starts):
            out[r] = mm[s:s + width]
        t1 = time.perf_counter()
        starts = rng.integers(0, n_windows, size=windows, dtype=np.int64) * seq_len
        t2 = time.perf_counter()
        out = mm[starts[:, None] + offsets].astype(np.int64)
        t3 = time.perf_counter()
        rows.append(t1 - t0)
        gather.append(t3 - t2)
    read = windows * width
    return {"rows_ms": 1000 * statistics.median(rows), "rows_tok_s": read / statistics.median(rows),
            "gather_ms": 1000 * statistics.median(gather), "gather_tok_s": read / statistics.median(gather)}


def fmt_rate(x):
    return f"{x / 1e6:.1f}M" if x >= 1e6 else f"{x / 1e3:.0f}k"


def render(rows, args, machine, datasets):
    lines = ["# The indexed-dataset reader against the step, and against a numpy memmap", "",
             f"Machine: {machine}.", "",
             "Written by `bench/data_reader.py` (its docstring says what is measured and how). "
             "Datasets: " + "; ".join(datasets) + ", synthetic ids written with numpy, read from the page cache. "
             f"C++: `--device {args.device} --set phase_timing=true`, {args.steps} steps, medians of the steps after "
             f"{args.warmup}; the data phase is `DataSource::train_batch` for each micro-batch (window lookup, "
             "reads from the memory map widened to int64, the batch tensors' allocation). numpy: the same number "
             f"of random windows of seq_len+1 tokens gathered into an int64 array, median of {args.numpy_steps} "
             "steps, row by row and in one fancy-indexed gather; ratio = C++ tokens/s / numpy row-by-row tokens/s. "
             "Step 1's data phase also shuffles the epoch's training windows (once per epoch: "
             "`TokenFile::fill_window`), which the medians leave out.",
             "",
             "| dataset | preset | windows x tokens / step | C++ data ms / step | step 1's data ms | step ms | data share of step | "
             "C++ reader tokens/s | numpy row-by-row tokens/s | numpy gather tokens/s | C++ / numpy | others' CPU |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        busy = f"{100 * r['busy']:.0f}%" + (" (contended)" if r["busy"] > CONTENDED else "")
        lines.append(
            f"| {r['dataset']} | {r['preset']} | {r['windows']} x {r['seq_len'] + 1} | {r['data_ms']:.3f} | {r['first_ms']:.2f} | "
            f"{r['step_ms']:.1f} | {100 * r['share']:.4f}% | {fmt_rate(r['tok_s'])} | {fmt_rate(r['rows_tok_s'])} | "
            f"{fmt_rate(r['gather_tok_s'])} | {r['tok_s'] / r['rows_tok_s']:.1f}x | {busy} |")
    lines += ["", "Rerun (about 2-3 minutes on 2 cores; a GPU row is on the waiting list of docs/gpu-run.md):", "",
              "```bash", "/usr/bin/python3 bench/data_reader.py --binary build/rocm-conformance-llm", "```"]
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--binary", default=str(REPO / "build" / "rocm-conformance-llm"))
    p.add_argument("--device", default="cpu", help="the binary's --device: cpu, or gpu (the HIP device on ROCm)")
    p.add_argument("--rows", default=",".join(DEFAULT_ROWS), help=f"comma list of {', '.join(ROWS)}")
    p.add_argument("--tokens", type=int, default=50_000_000, help="the gpt2 dataset's tokens")
    p.add_argument("--other-tokens", type=int, default=20_000_000, help="the llama3 and wide datasets' tokens")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--warmup", type=int, default=3, help="steps left out of the medians")
    p.add_argument("--numpy-steps", type=int, default=200)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--output", default=str(BENCH_DIR / "data-reader.md"))
    args = p.parse_args()

    wanted = [r for r in args.rows.split(",") if r]
    unknown = [r for r in wanted if r not in ROWS]
    if unknown:
        sys.exit(f"unknown rows {unknown}: choose from {', '.join(ROWS)}")
    rows, datasets, written, libtorch = [], [], {}, "unknown"
    with tempfile.TemporaryDirectory(prefix="data-reader-") as workdir:
        for key in wanted:
            ds, preset, extra = ROWS[key]
            dtype, vocab = DATASETS[ds]
            tokens = args.tokens if ds == "gpt2" else args.other_tokens
            prefix = str(Path(workdir) / ds)
            name = f"{ds}: {dtype}, vocab {vocab:,}"
            if ds not in written:
                t0 = time.time()
                docs = write_dataset(prefix, tokens, vocab, dtype, args.seed)
                written[ds] = True
                datasets.append(f"{name}, {tokens / 1e6:g}M tokens in {docs:,} documents")
                print(f"wrote {prefix}.bin/.idx/.json: {datasets[-1]} ({time.time() - t0:.1f} s)", flush=True)
            r = run_cpp(args.binary, args.device, prefix, preset, args.steps, args.warmup, extra, workdir, key)
            r.update(run_numpy(prefix, dtype, r["windows"], r["seq_len"], args.numpy_steps, args.seed))
            r.update(dataset=name, preset=preset + "".join(f" `{e}`" for e in extra if e != "--set"))
            libtorch = r["libtorch"]
            rows.append(r)
            print(f"{key}: C++ data {r['data_ms']:.3f} ms of a {r['step_ms']:.1f} ms step "
                  f"({100 * r['share']:.4f}%), {fmt_rate(r['tok_s'])} tokens/s; numpy row-by-row "
                  f"{r['rows_ms']:.3f} ms ({fmt_rate(r['rows_tok_s'])} tokens/s), gather {r['gather_ms']:.3f} ms "
                  f"({fmt_rate(r['gather_tok_s'])} tokens/s); run {r['wall_s']:.1f} s wall, others' CPU "
                  f"{100 * r['busy']:.0f}%", flush=True)
    table = render(rows, args, machine_line(libtorch), datasets)
    Path(args.output).write_text(table)
    print()
    print(table)
    print(f"written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
