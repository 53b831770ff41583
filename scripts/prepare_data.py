"""Tokenizes a corpus once, offline, into Megatron-LM's indexed dataset, which the C++ trainer
memory-maps (`--data PREFIX`; docs/data.md, "Indexed datasets").

    prepare_data.py --tokenizer tokenizer.json --output PREFIX INPUT... [--text-field text] [--workers N]

INPUT: `.jsonl`/`.json` (one document per record, its `--text-field`), `.parquet`, a folder
written by `datasets`' `save_to_disk`, or any other file as one plain-text document. Each
document is encoded with the Hugging Face tokenizer, with BOS first where the
`tokenizer_config.json` beside it sets `add_bos_token`, and EOS after it. Writes PREFIX.bin
(the ids back to back: uint16 below 65,500 ids, int32 above, Megatron's rule), PREFIX.idx
(one sequence per document) and PREFIX.json (the tokenizer's sha256, vocabulary and special
ids, token and document counts, largest id, sources). The three are written beside their
final names and renamed at the end: an interrupted run leaves no half-written shards.
Run it through scripts/prepare_data.sh, which provides the pinned `datasets` and `tokenizers`.
"""

import argparse
import hashlib
import json
import os
import struct
import sys
import time

import numpy as np

INDEX_HEADER = b"MMIDIDX\x00\x00"
DTYPE_CODES = {np.dtype(np.uint16): 8, np.dtype(np.int32): 4}


_worker_tokenizer = {}


def worker_tokenizer(path):
    """The tokenizer of this process (each tokenizing worker loads its own once)."""
    from tokenizers import Tokenizer

    if path not in _worker_tokenizer:
        _worker_tokenizer[path] = Tokenizer.from_file(path)
    return _worker_tokenizer[path]


def fail(message):
    print(f"prepare_data: {message}", file=sys.stderr)
    sys.exit(2)


def token_name(value):
    """A tokenizer_config.json token entry: a string or {"content": ...}."""
    if isinstance(value, dict):
        return value.get("content")
    return value


def special_ids(tokenizer, tokenizer_path):
    """BOS, EOS and PAD ids as tokenizer_config.json beside the tokenizer names them; EOS falls
    back to the usual names. Returns (ids, add_bos)."""
    config_path = os.path.join(os.path.dirname(os.path.abspath(tokenizer_path)), "tokenizer_config.json")
    config = {}
    if os.path.exists(config_path):
        with open(config_path) as f:
            config = json.load(f)
    ids = {}
    for key in ("bos", "eos", "pad"):
        name = token_name(config.get(f"{key}_token"))
        if name is not None and tokenizer.token_to_id(name) is not None:
            ids[key] = tokenizer.token_to_id(name)
    if "eos" not in ids:
        for name in ("<|endoftext|>", "</s>", "<|end_of_text|>", "<eos>"):
            if tokenizer.token_to_id(name) is not None:
                ids["eos"] = tokenizer.token_to_id(name)
                break
    if "eos" not in ids:
        fail(f"the tokenizer '{tokenizer_path}' has no end-of-document token: name it as eos_token in "
             f"{config_path}")
    add_bos = bool(config.get("add_bos_token", False))
    if add_bos and "bos" not in ids:
        fail(f"{config_path} sets add_bos_token but names no bos_token the tokenizer has")
    return ids, add_bos


def load_documents(path, text_field):
    """One `datasets` Dataset with a `text` column per input."""
    import datasets

    if os.path.isdir(path):
        ds = datasets.load_from_disk(path)
        if isinstance(ds, datasets.DatasetDict):
            fail(f"'{path}' is a DatasetDict ({', '.join(ds)}): give the folder of one split")
    elif path.endswith((".jsonl", ".json")):
        ds = datasets.load_dataset("json", data_files=path, split="train")
    elif path.endswith(".parquet"):
        ds = datasets.load_dataset("parquet", data_files=path, split="train")
    else:
        with open(path, encoding="utf-8", errors="replace") as f:
            ds = datasets.Dataset.from_dict({text_field: [f.read()]})
    if text_field not in ds.column_names:
        fail(f"'{path}' has no field '{text_field}' (its fields: {', '.join(ds.column_names)}; --text-field chooses)")
    return ds.select_columns([text_field])


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_index(path, dtype, lengths):
    lengths = np.asarray(lengths, dtype=np.int32)
    pointers = np.zeros(len(lengths), dtype=np.int64)
    np.cumsum(lengths[:-1].astype(np.int64) * dtype.itemsize, out=pointers[1:])
    with open(path, "wb") as f:
        f.write(INDEX_HEADER)
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", DTYPE_CODES[dtype]))
        f.write(struct.pack("<Q", len(lengths)))
        f.write(struct.pack("<Q", len(lengths) + 1))
        f.write(lengths.tobytes(order="C"))
        f.write(pointers.tobytes(order="C"))
        f.write(np.arange(len(lengths) + 1, dtype=np.int64).tobytes(order="C"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokenizer", required=True, help="a Hugging Face tokenizer.json")
    parser.add_argument("--output", required=True, help="PREFIX: writes PREFIX.bin, PREFIX.idx, PREFIX.json")
    parser.add_argument("--text-field", default="text", help="the field holding a document's text (default: text)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="tokenizing processes")
    parser.add_argument("inputs", nargs="+", metavar="INPUT")
    args = parser.parse_args()
    for path in [args.tokenizer] + args.inputs:
        if not os.path.exists(path):
            fail(f"'{path}' does not exist")
    if args.workers < 1:
        fail(f"--workers {args.workers}: must be at least 1")

    import datasets
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(args.tokenizer)
    ids, add_bos = special_ids(tokenizer, args.tokenizer)
    vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
    dtype = np.dtype(np.uint16) if vocab_size < 65500 else np.dtype(np.int32)
    corpus = datasets.concatenate_datasets([load_documents(p, args.text_field) for p in args.inputs])

    tokenizer_path = args.tokenizer
    text_field = args.text_field
    prefix = [ids["bos"]] if add_bos else []
    suffix = [ids["eos"]]

    def encode(batch):
        encoded = worker_tokenizer(tokenizer_path).encode_batch(batch[text_field], add_special_tokens=False)
        return {"ids": [prefix + e.ids + suffix for e in encoded]}

    start = time.time()
    workers = min(args.workers, max(1, len(corpus)))
    tokenized = corpus.map(encode, batched=True, batch_size=256, num_proc=workers if workers > 1 else None,
                           remove_columns=[text_field], desc="tokenizing")

    out_dir = os.path.dirname(os.path.abspath(args.output))
    os.makedirs(out_dir, exist_ok=True)
    partial = {ext: f"{args.output}{ext}.partial" for ext in (".bin", ".idx", ".json")}
    lengths, largest, tokens = [], 0, 0
    with open(partial[".bin"], "wb") as bin_file:
        for batch in tokenized.iter(batch_size=1024):
            for doc in batch["ids"]:
                array = np.asarray(doc, dtype=np.int64)
                if array.size == 0:
                    continue
                largest = max(largest, int(array.max()))
                bin_file.write(array.astype(dtype).tobytes(order="C"))
                lengths.append(array.size)
                tokens += array.size
    if not lengths:
        fail("the inputs hold no documents")
    write_index(partial[".idx"], dtype, lengths)
    sidecar = {
        "format": "megatron-indexed-dataset",
        "tokenizer": {"path": os.path.abspath(args.tokenizer), "sha256": sha256_of(args.tokenizer)},
        "vocab_size": vocab_size,
        "special_ids": ids,
        "add_bos": add_bos,
        "dtype": dtype.name,
        "tokens": tokens,
        "documents": len(lengths),
        "largest_id": largest,
        "sources": [os.path.abspath(p) for p in args.inputs],
        "text_field": args.text_field,
    }
    with open(partial[".json"], "w") as f:
        json.dump(sidecar, f, indent=2)
        f.write("\n")
    for ext, path in partial.items():
        os.replace(path, args.output + ext)
    seconds = max(time.time() - start, 1e-9)
    print(f"prepare_data: wrote {args.output}.bin/.idx/.json: {len(lengths)} documents, {tokens} tokens "
          f"({dtype.name}, vocabulary {vocab_size}), {tokens / seconds:.0f} tokens/s")


if __name__ == "__main__":
    main()
