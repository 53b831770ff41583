#!/usr/bin/env python3
"""The specification's own stack as the peer: Hugging Face Transformers, Accelerate and Datasets.

Trains the model a rocm-conformance-llm checkpoint holds (its exported `config.json` picks the
class, `GPT2LMHeadModel` or `LlamaForCausalLM`; `from_pretrained` loads its weights: bench/hf_bench.py
hands it the C++ trainer's initial weights, so both sides start from the same point) with the C++
run's hyper-parameters (the run's `config.json`), through Accelerate (mixed precision, gradient
accumulation, gradient clipping) on a Datasets pipeline of the same token windows in the same
order as the C++ data layer (docs/data.md) reads from `--data`:
- a text or JSONL file: byte tokens, BOS/EOS per document, read through Datasets;
- an indexed dataset (PREFIX, PREFIX.bin or PREFIX.idx, where PREFIX.idx exists): Megatron-LM's
  format read with a numpy memory map, the documents' tokens back to back (the model's vocabulary
  is the checkpoint's: the tokenizer's);
- a blend "W1 PATH1 W2 PATH2 ..." of either kind: each part split and shuffled with its own
  streams, the parts interleaved by the cycle of 1,000 slots of docs/data.md "Blending".
Windows are cut, split and shuffled with data.cpp's SplitMix64 streams.

    hf_peer.py --checkpoint DIR --run-config RUN/config.json --data DATA --threads 2
               [--steps S] [--warmup W] [--device cpu|cuda]

Prints one JSON object: median tokens/s over the steps after warm-up, per-step losses and
wall times, parameter count and the library versions. Needs a Python with torch, transformers,
accelerate and datasets (the wheel lane's environment, scripts/wheel_env.sh; numpy too for an
indexed dataset); without datasets (a GPU machine with carried wheels) the same windows come from
a plain reader, and the versions say so.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

import accelerate
try:
    import datasets
except ImportError:  # a GPU machine gets carried wheels, and Datasets' pyarrow alone is 53 MB
    datasets = None
import torch
import torch.nn.functional as F
import transformers
from accelerate import Accelerator
from torch.utils.data import DataLoader

BOS, EOS = 256, 257                         # data.hpp byte_tokens (text and JSONL files)
WINDOW_SPLIT, EPOCH_ORDER = 4, 5            # data.cpp Stream: window_split, epoch_order
CYCLE = 1000                                # docs/data.md "Blending": slots per cycle
MEGATRON_DTYPES = {1: "uint8", 2: "int8", 3: "int16", 4: "int32", 5: "int64", 8: "uint16"}  # the .idx dtype code
ADAM_BETAS, ADAM_EPS = (0.9, 0.95), 1e-8    # loop/trainer.cpp
MASK64 = (1 << 64) - 1


def mix64(x):
    """data.cpp mix64 (SplitMix64's finaliser), in 64-bit unsigned arithmetic."""
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def stream_seed(seed, stream, index):
    return mix64(mix64(mix64(seed) ^ stream) ^ index)


def shuffled(items, seed):
    """data.cpp shuffle with a SplitMix seeded by `seed` (Fisher-Yates from the back)."""
    items, state = list(items), seed
    for i in range(len(items) - 1, 0, -1):
        j = mix64(state) % (i + 1)
        state = (state + 1) & MASK64
        items[i], items[j] = items[j], items[i]
    return items


def token_stream(path):
    """The file as data.cpp tokenize_file reads it, through Datasets: BOS, the bytes, EOS per
    document (a JSONL line's "text", or the whole file)."""
    if datasets is None:  # the same documents, read without Datasets (reported as absent)
        with open(path, "rb") as f:
            raw = f.read().decode("utf-8", "surrogateescape")
        texts = [json.loads(line)["text"] for line in raw.splitlines() if line] if path.endswith(".jsonl") else [raw]
        return [t for text in texts for t in (BOS, *text.encode("utf-8", "surrogateescape"), EOS)]
    if path.endswith(".jsonl"):
        docs = datasets.load_dataset("json", data_files=path, split="train")
    else:
        with open(path, "rb") as f:
            docs = datasets.Dataset.from_dict({"text": [f.read().decode("utf-8", "surrogateescape")]})
    encoded = docs.map(lambda d: {"ids": [BOS, *d["text"].encode("utf-8", "surrogateescape"), EOS]},
                       remove_columns=docs.column_names)
    return [t for ids in encoded["ids"] for t in ids]


def indexed_prefix(path):
    """PREFIX for an indexed dataset named PREFIX, PREFIX.bin or PREFIX.idx; None for a text file."""
    prefix = path[:-4] if path.endswith((".bin", ".idx")) else path
    return prefix if os.path.isfile(prefix + ".idx") else None


def indexed_tokens(prefix):
    """Megatron's indexed dataset read with numpy from the format (docs/data.md): the documents'
    tokens back to back, a memory map of PREFIX.bin (its sequences lie back to back)."""
    import numpy as np  # only here: a GPU machine's carried wheels may lack it
    idx = np.memmap(prefix + ".idx", dtype=np.uint8, mode="r")
    if bytes(idx[:9]) != b"MMIDIDX\x00\x00" or int(idx[9:17].view(np.uint64)[0]) != 1:
        sys.exit(f"hf_peer: {prefix}.idx is not a version 1 Megatron index")
    dtype = np.dtype(MEGATRON_DTYPES[int(idx[17])])
    sequences = int(idx[18:26].view(np.uint64)[0])
    lengths = idx[34:34 + 4 * sequences].view(np.int32)
    pointers = idx[34 + 4 * sequences:34 + 12 * sequences].view(np.int64)
    ends = np.cumsum(lengths, dtype=np.int64)
    if not np.array_equal(pointers, (ends - lengths) * dtype.itemsize):
        sys.exit(f"hf_peer: {prefix}.idx: the sequences do not lie back to back")
    return np.memmap(prefix + ".bin", dtype=dtype, mode="r")[:int(ends[-1]) if sequences else 0]


def number(word):
    try:
        return float(word)
    except ValueError:
        return None


def data_parts(spec):
    """[(weight, tokens)] of --data (data.cpp data_parts): a blend "W1 PATH1 W2 PATH2 ..." where
    it starts with a number, else one text/JSONL file or indexed dataset (spaces and all)."""
    words = spec.split()
    if len(words) < 2 or number(words[0]) is None:
        pairs = [(1.0, spec)]
    else:
        pairs = [(number(w), path) for w, path in zip(words[::2], words[1::2])]
        if len(words) % 2 or not all(w is not None and 0 < w < math.inf for w, _ in pairs):
            sys.exit(f"hf_peer: --data '{spec}' is not WEIGHT PATH pairs with positive weights")
    return [(w, indexed_tokens(indexed_prefix(path)) if indexed_prefix(path) else token_stream(path))
            for w, path in pairs]


def blend_cycle(weights):
    """docs/data.md "Blending": each slot's part and its rank among that part's slots, and the parts'
    slot counts c_p, for a cycle of C slots (one slot for one part). c_p: at least one, the rest by
    largest remainder (lowest p on a tie), any overshoot taken from the largest; slots dealt to the
    part furthest behind its share (lowest p on a tie)."""
    cycle = CYCLE if len(weights) > 1 else 1
    exact = [w / sum(weights) * cycle for w in weights]  # data.cpp BlendCycle, its order of operations
    counts = [max(1, math.floor(q)) for q in exact]
    parts = range(len(weights))
    while sum(counts) < cycle:
        counts[max(parts, key=lambda p: (exact[p] - counts[p], -p))] += 1
    while sum(counts) > cycle:
        counts[max(parts, key=lambda p: (counts[p], -p))] -= 1
    slot_part, slot_rank, taken = [], [], [0] * len(counts)
    for j in range(cycle):
        p = max(parts, key=lambda q: (counts[q] * (j + 1) / cycle - taken[q], -q))
        slot_part.append(p)
        slot_rank.append(taken[p])
        taken[p] += 1
    return counts, slot_part, slot_rank


def training_windows(parts, training, micro_batches):
    """The windows the C++ trainer reads, micro-batch by micro-batch (data.cpp TokenFile): per part
    `p` of `P`, windows of seq_len + 1 overlapping by one, the validation share split off by the
    stream (window_split, p), the rest reshuffled every epoch e by (epoch_order, e*P + p); training
    sample s is the part and part sample of its slot in the blend's cycle (one part: sample s of
    the part); micro-batch i holds samples i*B .. i*B+B-1."""
    seq, seed, val_fraction = training["seq_len"], training["seed"], training["val_fraction"]
    train = []
    for p, (_, tokens) in enumerate(parts):
        windows = (len(tokens) - 1) // seq
        val_count = max(1, math.floor(val_fraction * windows + 0.5)) if val_fraction > 0 else 0  # llround
        train.append(shuffled([w * seq for w in range(windows)], stream_seed(seed, WINDOW_SPLIT, p))[val_count:])
    counts, slot_part, slot_rank = blend_cycle([w for w, _ in parts])
    order, epoch_cache = [], {}
    for sample in range(micro_batches * training["batch_size"]):
        cycle, slot = divmod(sample, len(slot_part))
        p = slot_part[slot]
        epoch, at = divmod(cycle * counts[p] + slot_rank[slot], len(train[p]))
        if (p, epoch) not in epoch_cache:
            epoch_cache[p, epoch] = shuffled(train[p], stream_seed(seed, EPOCH_ORDER, epoch * len(parts) + p))
        start = epoch_cache[p, epoch][at]
        order.append([int(t) for t in parts[p][1][start:start + seq + 1]])
    if datasets is None:
        return [{"window": torch.tensor(w)} for w in order]
    return datasets.Dataset.from_dict({"window": order}).with_format("torch")


def learning_rate_at(training, step):
    """loop/trainer.cpp learning_rate_at: linear warm-up, cosine decay to lr * min_lr_ratio."""
    lr, warmup = training["learning_rate"], training["warmup_steps"]
    if step <= warmup:
        return lr * step / warmup
    min_lr = lr * training["min_lr_ratio"]
    progress = min(1.0, (step - warmup) / max(1, training["steps"] - warmup))
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * progress))


def decay_groups(model, weight_decay):
    """The C++ trainer's AdamW groups: decay on matrices, not on embeddings, norms or biases."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        embedding = any(part in name for part in ("wte", "wpe", "embed_tokens"))
        (decay if p.dim() == 2 and not embedding else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True, help="a checkpoint directory: the weights to start from")
    parser.add_argument("--run-config", required=True, help="the C++ run's config.json")
    parser.add_argument("--data", required=True, help="the C++ run's --data: a text or JSONL file, an indexed "
                        "dataset PREFIX, or a blend 'W1 PATH1 W2 PATH2 ...'")
    parser.add_argument("--threads", type=int, required=True, help="torch.set_num_threads")
    parser.add_argument("--steps", type=int, default=0, help="optimizer steps (0: the run's)")
    parser.add_argument("--warmup", type=int, default=3, help="leading steps left out of the median")
    parser.add_argument("--device", default="cpu", help="cpu, or cuda (the HIP device on ROCm)")
    args = parser.parse_args()

    training = json.load(open(args.run_config))["training"]
    if training["mixed_precision"] not in ("fp32", "bf16", "fp16") or training["dropout"] or training["drop_path"]:
        sys.exit("hf_peer: only dropout-free runs are replicated (their losses are comparable step by step)")
    steps = args.steps or training["steps"]
    accum, batch, seq = training["grad_accum_steps"], training["batch_size"], training["seq_len"]
    torch.set_num_threads(args.threads)
    torch.manual_seed(training["seed"])

    precision = {"fp32": "no", "bf16": "bf16", "fp16": "fp16"}[training["mixed_precision"]]
    accelerator = Accelerator(mixed_precision=precision, gradient_accumulation_steps=accum,
                              cpu=args.device == "cpu")
    model = transformers.AutoModelForCausalLM.from_pretrained(args.checkpoint, dtype=torch.float32)
    optimizer = torch.optim.AdamW(decay_groups(model, training["weight_decay"]), lr=training["learning_rate"],
                                  betas=ADAM_BETAS, eps=ADAM_EPS)
    # LambdaLR's factor for its n-th step is that of the C++ trainer's step n + 1 (1-based).
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda n: learning_rate_at(training, n + 1) / training["learning_rate"])
    windows = training_windows(data_parts(args.data), training, steps * accum)
    loader = DataLoader(windows, batch_size=batch, shuffle=False)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    model.train()

    step_times, losses = [], []
    micro, loss_sum, start = 0, torch.zeros(()), time.perf_counter()
    for window in loader:
        window = window["window"]
        with accelerator.accumulate(model):
            logits = model(window[:, :seq]).logits
            loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), window[:, 1:].reshape(-1))
            accelerator.backward(loss)
            if accelerator.sync_gradients:
                accelerator.clip_grad_norm_(model.parameters(), training["grad_clip"])
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
        loss_sum = loss_sum.to(loss.device) + loss.detach()
        micro += 1
        if micro % accum == 0:
            # One read per optimizer step, as a training loop that logs its loss does; on a GPU it
            # also makes the step's wall time the device's.
            losses.append(loss_sum.item() / accum)
            step_times.append(time.perf_counter() - start)
            loss_sum, start = torch.zeros(()), time.perf_counter()
    if len(step_times) <= args.warmup:
        sys.exit("hf_peer: --steps must exceed --warmup")
    tokens = accum * batch * seq
    timed = step_times[args.warmup:]
    print(json.dumps({
        "impl": "hf", "model": type(accelerator.unwrap_model(model)).__name__, "device": args.device,
        "precision": training["mixed_precision"], "threads": torch.get_num_threads(),
        "parameters": sum(p.numel() for p in model.parameters()), "tokens_per_step": tokens,
        "steps": len(step_times), "timed_steps": len(timed), "tokens_per_s": statistics.median(tokens / t for t in timed),
        "losses": losses, "step_times_s": step_times,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "accelerate": accelerate.__version__, "datasets": datasets.__version__ if datasets else "absent (a plain reader of the same windows)"},
    }))


if __name__ == "__main__":
    main()
