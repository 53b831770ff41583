"""scripts/prepare_data.sh end to end, on local data only: a byte-level BPE trained here by
`tokenizers` on Debian's licence texts; JSONL, Parquet, a `save_to_disk` folder and plain text
tokenized into Megatron's indexed dataset; the shards read back with numpy alone (an independent
reader of the format) equal the tokenizer's own encoding, BOS and EOS included; a vocabulary
above 65,500 is written as int32; an EOS that tokenizer_config.json names as {"content": ...} ends
the documents; bad inputs exit 2; the binary trains on the shards, its loss falling and its report
naming the tokenizer; and it trains on the same windows in the same order as bench/hf_peer.py
(Transformers + Accelerate + Datasets, its own numpy reader of the shards and its own blend
arithmetic): from the same initial weights, their per-step fp32 losses agree to float rounding on
one prefix and on the blend "0.7 A 0.3 B" of two (docs/data.md).

    python3 test_prepare_data.py BINARY     (a Python with datasets, tokenizers, numpy, torch,
                                             transformers and accelerate: the wheel lane's)
"""

import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import types

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PREPARE = os.path.join(REPO, "scripts", "prepare_data.sh")
LICENCES = "/usr/share/common-licenses"
sys.path.insert(0, os.path.join(REPO, "bench"))  # bench/hf_bench.py's helpers, for the peer check
# The peer check's runs (bench/hf_bench.py's row form: name, preset, --set overrides, steps,
# warm-up): a GPT-2 layout the peer loads as GPT2LMHeadModel; 12 steps of 16 windows take part
# B (one short licence) through several of its epochs.
PEER_ROW = ("peer", "smoke", ["position=learned", "seq_len=32", "batch_size=16"], 12, 0)
PEER_TOLERANCE = 1e-4  # relative, per step: measured 9e-7 (one prefix), 5e-6 (blend); other windows 1e-3 and up


def check(condition, message):
    if not condition:
        print(f"FAIL: {message}", file=sys.stderr)
        sys.exit(1)


def paragraphs(name):
    with open(os.path.join(LICENCES, name), encoding="utf-8") as f:
        return [p.strip() for p in f.read().split("\n\n") if p.strip()]


def train_tokenizer(directory, extra_tokens=0):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=["<|endoftext|>", "<s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    files = sorted(p for p in glob.glob(os.path.join(LICENCES, "*")) if os.path.isfile(p))
    tok.train(files, trainer)
    if extra_tokens:
        tok.add_tokens([f"<extra_{i}>" for i in range(extra_tokens)])
    os.makedirs(directory, exist_ok=True)
    tok.save(os.path.join(directory, "tokenizer.json"))
    with open(os.path.join(directory, "tokenizer_config.json"), "w") as f:
        json.dump({"add_bos_token": True, "bos_token": "<s>", "eos_token": "<|endoftext|>"}, f)
    return Tokenizer.from_file(os.path.join(directory, "tokenizer.json"))


def read_megatron(prefix):
    """The documents of PREFIX.bin/.idx, read with numpy from the format's definition."""
    with open(prefix + ".idx", "rb") as f:
        idx = f.read()
    check(idx[:9] == b"MMIDIDX\x00\x00", "the index header is MMIDIDX")
    version, = np.frombuffer(idx, np.uint64, 1, 9)
    code = idx[17]
    sequences, doc_entries = np.frombuffer(idx, np.uint64, 2, 18)
    check(version == 1, f"index version {version}")
    dtype = {8: np.uint16, 4: np.int32}[code]
    s = int(sequences)
    lengths = np.frombuffer(idx, np.int32, s, 34)
    pointers = np.frombuffer(idx, np.int64, s, 34 + 4 * s)
    docs = np.frombuffer(idx, np.int64, int(doc_entries), 34 + 12 * s)
    check(len(idx) == 34 + 12 * s + 8 * int(doc_entries), "the index holds exactly its tables")
    check(list(docs) == list(range(s + 1)), "one sequence per document")
    data = np.memmap(prefix + ".bin", dtype=dtype, mode="r")
    itemsize = np.dtype(dtype).itemsize
    return np.dtype(dtype), [np.array(data[p // itemsize:p // itemsize + n]) for p, n in zip(pointers, lengths)]


def peer_loss_gap(binary, data, init, workdir):
    """The largest relative per-step loss difference between the C++ trainer and bench/hf_peer.py
    on `data`, both from the weights in `init` (None: export them first, as bench/hf_bench.py does)."""
    from hf_bench import initial_weights, run_cpp, run_hf

    args = types.SimpleNamespace(device="cpu", threads=1, python=sys.executable)
    init = init or initial_weights(args, binary, PEER_ROW, "fp32", data, workdir)
    cpp = run_cpp(args, binary, PEER_ROW, "fp32", data, workdir)
    hf = run_hf(args, PEER_ROW, init, cpp, data)
    check(len(cpp["losses"]) == len(hf["losses"]) == PEER_ROW[3], f"losses per step: {cpp['losses']} {hf['losses']}")
    return max(abs(c - h) / abs(c) for c, h in zip(cpp["losses"], hf["losses"])), init


def prepare(env, *args):
    return subprocess.run(["bash", PREPARE, *args], env=env, capture_output=True, text=True, timeout=600)


def main():
    binary = sys.argv[1]
    env = dict(os.environ, RCL_DATA_VENV=sys.prefix)
    with tempfile.TemporaryDirectory() as tmp:
        import datasets

        tok = train_tokenizer(os.path.join(tmp, "tok"))
        tokenizer_json = os.path.join(tmp, "tok", "tokenizer.json")
        bos, eos = tok.token_to_id("<s>"), tok.token_to_id("<|endoftext|>")
        texts = {"gpl": paragraphs("GPL-3"), "apache": paragraphs("Apache-2.0"), "mpl": paragraphs("MPL-2.0")}
        jsonl = os.path.join(tmp, "gpl.jsonl")
        with open(jsonl, "w") as f:
            for i, t in enumerate(texts["gpl"]):
                f.write(json.dumps({"id": i, "body": t}) + "\n")
        parquet = os.path.join(tmp, "apache.parquet")
        datasets.Dataset.from_dict({"body": texts["apache"]}).to_parquet(parquet)
        saved = os.path.join(tmp, "mpl_saved")
        datasets.Dataset.from_dict({"body": texts["mpl"]}).save_to_disk(saved)
        plain = os.path.join(tmp, "plain.txt")
        with open(os.path.join(LICENCES, "BSD"), encoding="utf-8") as f:
            plain_text = f.read()
        with open(plain, "w", encoding="utf-8") as f:
            f.write(plain_text)

        prefix = os.path.join(tmp, "shards", "licences")
        r = prepare(env, "--tokenizer", tokenizer_json, "--output", prefix, "--text-field", "body", "--workers", "2",
                    jsonl, parquet, saved, plain)
        check(r.returncode == 0, f"prepare_data exited {r.returncode}: {r.stdout}{r.stderr}")
        last = r.stdout.strip().splitlines()[-1]
        check("tokens/s" in last, f"its last line gives tokens/s: {last}")

        expected = [[bos] + tok.encode(t, add_special_tokens=False).ids + [eos]
                    for t in texts["gpl"] + texts["apache"] + texts["mpl"] + [plain_text]]
        dtype, documents = read_megatron(prefix)
        check(dtype == np.uint16, f"a vocabulary of {tok.get_vocab_size()} is written as uint16, not {dtype}")
        check(len(documents) == len(expected), f"{len(documents)} documents, expected {len(expected)}")
        for i, (got, want) in enumerate(zip(documents, expected)):
            check(got.tolist() == want, f"document {i} differs from the tokenizer's encoding")
        with open(prefix + ".json") as f:
            sidecar = json.load(f)
        with open(tokenizer_json, "rb") as f:
            sha = hashlib.sha256(f.read()).hexdigest()
        flat = [t for d in expected for t in d]
        check(sidecar["tokenizer"]["sha256"] == sha, "the sidecar names the tokenizer's sha256")
        check(sidecar["vocab_size"] == tok.get_vocab_size(), "the sidecar's vocabulary")
        check(sidecar["special_ids"] == {"bos": bos, "eos": eos}, f"special ids {sidecar['special_ids']}")
        check((sidecar["tokens"], sidecar["documents"], sidecar["largest_id"]) == (len(flat), len(expected), max(flat)),
              "the sidecar's counts")
        check(not glob.glob(prefix + "*.partial"), "no partial files left")

        # Above 65,500 ids: int32, Megatron's rule.
        big = train_tokenizer(os.path.join(tmp, "big"), extra_tokens=66000)
        big_prefix = os.path.join(tmp, "big_shards")
        r = prepare(env, "--tokenizer", os.path.join(tmp, "big", "tokenizer.json"), "--output", big_prefix,
                    "--text-field", "body", jsonl)
        check(r.returncode == 0, f"prepare_data (int32) exited {r.returncode}: {r.stderr}")
        dtype, documents = read_megatron(big_prefix)
        check(dtype == np.int32, f"a vocabulary of {big.get_vocab_size()} is written as int32, not {dtype}")
        check(documents[0].tolist() == [bos] + big.encode(texts["gpl"][0], add_special_tokens=False).ids + [eos],
              "the int32 shard's first document")

        # A token named as {"content": ...} (how transformers writes tokenizer_config.json): read
        # by prepare_data alone. "<s>" is none of the names EOS falls back to, so only that entry
        # can make it the end of each document.
        dict_tok = os.path.join(tmp, "dict_tok")
        os.makedirs(dict_tok)
        shutil.copy(tokenizer_json, dict_tok)
        with open(os.path.join(dict_tok, "tokenizer_config.json"), "w") as f:
            json.dump({"eos_token": {"content": "<s>", "special": True}}, f)
        dict_prefix = os.path.join(tmp, "dict_shards")
        r = prepare(env, "--tokenizer", os.path.join(dict_tok, "tokenizer.json"), "--output", dict_prefix, plain)
        check(r.returncode == 0, f"prepare_data (eos_token as content) exited {r.returncode}: {r.stderr}")
        _, documents = read_megatron(dict_prefix)
        check([d.tolist() for d in documents] == [tok.encode(plain_text, add_special_tokens=False).ids + [bos]],
              "an eos_token given as {'content': '<s>'} ends the document with <s>")

        # Bad inputs: exit 2 and a line naming the problem; nothing written.
        bad_prefix = os.path.join(tmp, "bad")
        r = prepare(env, "--tokenizer", tokenizer_json, "--output", bad_prefix, jsonl)
        check(r.returncode == 2 and "no field 'text'" in r.stderr, f"a missing field: {r.returncode} {r.stderr}")
        r = prepare(env, "--tokenizer", tokenizer_json, "--output", bad_prefix, os.path.join(tmp, "nope.jsonl"))
        check(r.returncode == 2 and "nope.jsonl" in r.stderr, f"a missing input: {r.returncode} {r.stderr}")
        check(not glob.glob(bad_prefix + "*"), "a refused run writes nothing")

        # The binary trains on the shards.
        out = os.path.join(tmp, "run")
        run = subprocess.run([binary, "--preset", "smoke", "--device", "cpu", "--set", "num_threads=1", "--set",
                              "eval_interval=0", "--steps", "25", "--data", prefix, "--output-dir", out],
                             capture_output=True, text=True, timeout=600)
        check(run.returncode == 0, f"training on the shards exited {run.returncode}: {run.stderr[-2000:]}")
        with open(os.path.join(out, "report.json")) as f:
            data = json.load(f)["data"]
        check(data["kind"] == "indexed_dataset" and data["tokenizer_sha256"] == sha, f"report data: {data}")
        check(data["vocab_size"] == tok.get_vocab_size(), f"the model's vocabulary is the tokenizer's: {data}")
        with open(os.path.join(out, "metrics.jsonl")) as f:
            losses = [r["loss"] for r in map(json.loads, f) if "loss" in r and "step" in r]
        check(len(losses) == 25 and losses[-1] < losses[0] - 1.0, f"the loss falls: {losses[0]} -> {losses[-1]}")

        # The same windows in the same order as bench/hf_peer.py: one prefix, then a blend of two.
        a, b = os.path.join(tmp, "peer", "gpl"), os.path.join(tmp, "peer", "bsd")
        for output, source in ((a, jsonl), (b, plain)):
            r = prepare(env, "--tokenizer", tokenizer_json, "--output", output, "--text-field", "body", source)
            check(r.returncode == 0, f"prepare_data {output} exited {r.returncode}: {r.stderr}")
        workdir = os.path.join(tmp, "peer")
        gap, init = peer_loss_gap(binary, a, None, workdir)
        print(f"prepare_data: C++ and hf_peer on one prefix, largest relative loss gap {gap:.2e}")
        check(gap < PEER_TOLERANCE, f"one prefix: the peer's losses differ by {gap:.2e} (relative)")
        gap, _ = peer_loss_gap(binary, f"0.7 {a} 0.3 {b}", init, workdir)
        print(f"prepare_data: C++ and hf_peer on the blend 0.7/0.3, largest relative loss gap {gap:.2e}")
        check(gap < PEER_TOLERANCE, f"the blend: the peer's losses differ by {gap:.2e} (relative)")
    print("prepare_data: every check passed")


if __name__ == "__main__":
    main()
