"""The checkpoint's Hugging Face export carries the data's tokenizer: a BPE trained here on
Debian's licence texts, the texts tokenized with it by scripts/prepare_data.sh, the binary trained
on the shards a few steps with a checkpoint, and the checkpoint folder loaded with transformers'
AutoTokenizer and AutoModelForCausalLM: the tokenizer encodes as the original tokenizer.json
does, config.json's BOS/EOS are the sidecar's, and the model runs on the ids. Twice: with the
tokenizer_config.json beside the tokenizer (copied) and without one (a minimal one written).

    python3 test_hf_export_tokenizer.py BINARY   (a Python with transformers, torch, datasets, tokenizers)
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_prepare_data import LICENCES, check, paragraphs, prepare, train_tokenizer  # noqa: E402


def export_of(binary, env, tmp, name, tokenizer_json):
    """The checkpoint folder of a 2-step GPT-2-layout run on the corpus tokenized with `tokenizer_json`."""
    corpus = os.path.join(tmp, "corpus.jsonl")
    if not os.path.exists(corpus):
        with open(corpus, "w") as f:
            for text in paragraphs("GPL-3") + paragraphs("Apache-2.0"):
                f.write(json.dumps({"text": text}) + "\n")
    prefix = os.path.join(tmp, name, "shards")
    r = prepare(env, "--tokenizer", tokenizer_json, "--output", prefix, "--workers", "1", corpus)
    check(r.returncode == 0, f"prepare_data exited {r.returncode}: {r.stdout}{r.stderr}")
    out = os.path.join(tmp, name, "run")
    run = subprocess.run([binary, "--preset", "smoke", "--device", "cpu", "--set", "num_threads=1", "--set",
                          "eval_interval=0", "--set", "position=learned", "--steps", "2", "--checkpoint-interval",
                          "2", "--data", prefix, "--output-dir", out], capture_output=True, text=True, timeout=600)
    check(run.returncode == 0, f"training exited {run.returncode}: {run.stderr[-2000:]}")
    with open(prefix + ".json") as f:
        return os.path.join(out, "checkpoints", "step-00000002"), json.load(f)


def check_export(ckpt, sidecar, tokenizer_json, config_kind):
    import torch
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with open(os.path.join(ckpt, "state.json")) as f:
        record = json.load(f)["tokenizer"]
    check(record == {"source": os.path.abspath(tokenizer_json), "sha256": sidecar["tokenizer"]["sha256"],
                     "copied": True, "tokenizer_config": config_kind}, f"state.json's tokenizer: {record}")
    original = Tokenizer.from_file(tokenizer_json)
    loaded = AutoTokenizer.from_pretrained(ckpt)
    with open(os.path.join(LICENCES, "MPL-2.0"), encoding="utf-8") as f:
        text = f.read()[:3000]
    want = original.encode(text, add_special_tokens=False).ids
    got = loaded(text, add_special_tokens=False)["input_ids"]
    check(got == want, f"{config_kind} config: the export's tokenizer encodes differently ({len(got)} vs {len(want)} ids)")
    check(loaded.decode(got) == original.decode(want), f"{config_kind} config: it decodes differently")
    ids = sidecar["special_ids"]
    check(loaded.eos_token_id == ids["eos"], f"the tokenizer's EOS {loaded.eos_token_id}, the sidecar's {ids}")
    check(loaded.bos_token_id == ids.get("bos"), f"the tokenizer's BOS {loaded.bos_token_id}, the sidecar's {ids}")

    model = AutoModelForCausalLM.from_pretrained(ckpt)
    check(model.config.eos_token_id == ids["eos"], f"config.json's eos_token_id {model.config.eos_token_id}: {ids}")
    check(model.config.bos_token_id == ids.get("bos"), f"config.json's bos_token_id {model.config.bos_token_id}: {ids}")
    check(model.config.vocab_size == sidecar["vocab_size"], "the model's vocabulary is the tokenizer's")
    window = want[:32]
    with torch.no_grad():
        logits = model(torch.tensor([window])).logits
    check(tuple(logits.shape) == (1, len(window), sidecar["vocab_size"]) and bool(torch.isfinite(logits).all()),
          f"the model's logits on the tokenizer's ids: {tuple(logits.shape)}")


def main():
    binary = sys.argv[1]
    env = dict(os.environ, RCL_DATA_VENV=sys.prefix)
    with tempfile.TemporaryDirectory() as tmp:
        # With train_tokenizer's tokenizer_config.json (add_bos_token, BOS <s>, EOS <|endoftext|>),
        # copied as it is.
        train_tokenizer(os.path.join(tmp, "tok"))
        tokenizer_json = os.path.join(tmp, "tok", "tokenizer.json")
        ckpt, sidecar = export_of(binary, env, tmp, "with_config", tokenizer_json)
        check(sidecar["special_ids"].keys() == {"bos", "eos"}, f"the sidecar's special ids: {sidecar['special_ids']}")
        check_export(ckpt, sidecar, tokenizer_json, "copied")

        # A bare tokenizer.json (EOS found by its usual name): the export writes a minimal config.
        bare = os.path.join(tmp, "bare", "tokenizer.json")
        os.makedirs(os.path.dirname(bare))
        shutil.copy(tokenizer_json, bare)
        ckpt, sidecar = export_of(binary, env, tmp, "bare_run", bare)
        check(sidecar["special_ids"].keys() == {"eos"}, f"the sidecar's special ids: {sidecar['special_ids']}")
        check_export(ckpt, sidecar, bare, "written")
    print("hf_export_tokenizer: every check passed")


if __name__ == "__main__":
    main()
