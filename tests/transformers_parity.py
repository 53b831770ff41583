#!/usr/bin/env python3
"""Loads one of our checkpoints with Hugging Face transformers and compares its logits with ours.

    transformers_parity.py CHECKPOINT_DIR PARITY.safetensors

PARITY.safetensors holds `tokens` [1, T] and the `logits` [1, T, V] our model computed from the
same checkpoint (tests/binary/test_checkpoints.cpp, TransformersLoads). Exit 0 when every weight was
used, none was missing, and the logits agree within float32 tolerance; 1 otherwise.
"""
import sys

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

TOLERANCE = 1e-4  # float32; measured on smoke: 2.4e-7 (GPT-2), 1.8e-7 (Llama)

checkpoint, parity = sys.argv[1], sys.argv[2]
model, info = AutoModelForCausalLM.from_pretrained(checkpoint, output_loading_info=True, dtype=torch.float32)
problems = {k: v for k, v in info.items() if k in ("missing_keys", "unexpected_keys", "mismatched_keys") and v}
model.eval()
expected = load_file(parity)
with torch.no_grad():
    logits = model(expected["tokens"]).logits
difference = (logits - expected["logits"]).abs().max().item()
print(f"{type(model).__name__}: loading problems {problems or 'none'}; max |logit difference| {difference:.3g} "
      f"(tolerance {TOLERANCE:g})")
sys.exit(0 if not problems and difference <= TOLERANCE else 1)
