#!/usr/bin/env python3
"""export_gguf.py - write the trained target (and drafter) as GGUF with PyPI `gguf`.

Target: general.architecture muse-glimmer, the keys of text-model.md section 3, the tokenizer
keys of tokenizer-and-chat.md section 2.1 (gpt2 BPE, pre "llama4", the chat template muse embeds,
read from shared/golden/chat/templates/muse-glimmer.jinja). Matrices F16 (or F32 with --f32),
norms F32. PyTorch Linear weights are [out, in], which gguf-py writes as ne {in, out}: the GGUF
orientation, no transpose.

Drafter (--drafter CKPT): general.architecture dflash, dflash.md section 2.2/2.3; the target's
tokenizer copied plus tokenizer.ggml.mask_token_id; no token_embd / output (borrowed).
"""
import argparse
import json

import gguf
import numpy as np
import torch

import common

TEMPLATE = "/work/shared/golden/chat/templates/muse-glimmer.jinja"


def add_tokenizer(w, tok_json, template):
    tj = json.load(open(tok_json))
    vocab = tj["model"]["vocab"]
    n_bpe = len(vocab)
    tokens = [None] * (n_bpe + len(tj["added_tokens"]))
    types = [1] * len(tokens)
    for t, i in vocab.items():
        tokens[i] = t
    for at in tj["added_tokens"]:
        tokens[at["id"]] = at["content"]
        types[at["id"]] = 3  # CONTROL
    assert all(t is not None for t in tokens) and len(tokens) == common.N_VOCAB
    merges = [m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]]
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_string("tokenizer.ggml.pre", "llama4")
    w.add_array("tokenizer.ggml.tokens", tokens)
    w.add_array("tokenizer.ggml.token_type", types)
    w.add_array("tokenizer.ggml.merges", merges)
    w.add_uint32("tokenizer.ggml.bos_token_id", common.BOS)
    w.add_uint32("tokenizer.ggml.eos_token_id", common.EOS)
    w.add_uint32("tokenizer.ggml.eot_token_id", common.EOT)
    w.add_uint32("tokenizer.ggml.padding_token_id", common.PAD)
    w.add_bool("tokenizer.ggml.add_bos_token", True)
    w.add_bool("tokenizer.ggml.add_eos_token", False)
    if template is not None:
        w.add_string("tokenizer.chat_template", template)


def mat(t, f32):
    a = t.detach().float().numpy()
    return a if f32 else a.astype(np.float16)


def vec(t):
    return t.detach().float().numpy().astype(np.float32)


def export_target(sd, hp, tok_json, path, f32, name):
    A = "muse-glimmer"
    w = gguf.GGUFWriter(path, A)
    w.add_string("general.type", "model")
    w.add_string("general.name", name)
    w.add_uint32("general.file_type", 0 if f32 else 1)
    w.add_uint32(f"{A}.context_length", hp["n_ctx"])
    w.add_uint32(f"{A}.embedding_length", hp["n_embd"])
    w.add_uint32(f"{A}.block_count", hp["n_layer"])
    w.add_uint32(f"{A}.feed_forward_length", hp["n_ff"])
    w.add_uint32(f"{A}.attention.head_count", hp["n_head"])
    w.add_uint32(f"{A}.attention.head_count_kv", hp["n_head_kv"])
    w.add_uint32(f"{A}.attention.key_length", hp["head_dim"])
    w.add_uint32(f"{A}.attention.value_length", hp["head_dim"])
    w.add_float32(f"{A}.attention.layer_norm_rms_epsilon", hp["eps"])
    w.add_float32(f"{A}.rope.freq_base", hp["rope_base"])
    w.add_float32(f"{A}.final_logit_softcapping", hp["softcap"])
    w.add_float32(f"{A}.logit_scale", hp["logit_scale"])
    w.add_uint32(f"{A}.attention.sliding_window", hp["n_swa"])
    w.add_array(f"{A}.attention.sliding_window_pattern", [bool(x) for x in hp["swa_pattern"]])
    add_tokenizer(w, tok_json, open(TEMPLATE).read())

    w.add_tensor("token_embd.weight", mat(sd["token_embd.weight"], f32))
    for il in range(hp["n_layer"]):
        p = f"layers.{il}."
        b = f"blk.{il}."
        w.add_tensor(b + "attn_norm.weight", vec(sd[p + "attn_norm"]))
        for n in ("attn_q", "attn_k", "attn_v"):
            w.add_tensor(b + n + ".weight", mat(sd[p + n + ".weight"], f32))
        w.add_tensor(b + "attn_q_norm.weight", vec(sd[p + "attn_q_norm"]))
        w.add_tensor(b + "attn_k_norm.weight", vec(sd[p + "attn_k_norm"]))
        w.add_tensor(b + "attn_gate.weight", mat(sd[p + "attn_gate.weight"], f32))
        w.add_tensor(b + "attn_output.weight", mat(sd[p + "attn_output.weight"], f32))
        w.add_tensor(b + "post_attention_norm.weight", vec(sd[p + "post_attention_norm"]))
        w.add_tensor(b + "ffn_norm.weight", vec(sd[p + "ffn_norm"]))
        for n in ("ffn_gate", "ffn_up", "ffn_down"):
            w.add_tensor(b + n + ".weight", mat(sd[p + n + ".weight"], f32))
        w.add_tensor(b + "post_ffw_norm.weight", vec(sd[p + "post_ffw_norm"]))
    w.add_tensor("output_norm.weight", vec(sd["output_norm"]))
    w.add_tensor("output.weight", mat(sd["output.weight"], f32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def export_drafter(sd, hp, dhp, tok_json, path, f32, name):
    A = "dflash"
    w = gguf.GGUFWriter(path, A)
    w.add_string("general.type", "model")
    w.add_string("general.name", name)
    w.add_uint32("general.file_type", 0 if f32 else 1)
    w.add_uint32(f"{A}.block_count", dhp["n_layer"])
    w.add_uint32(f"{A}.context_length", hp["n_ctx"])
    w.add_uint32(f"{A}.embedding_length", hp["n_embd"])
    w.add_uint32(f"{A}.feed_forward_length", dhp["n_ff"])
    w.add_uint32(f"{A}.attention.head_count", dhp["n_head"])
    w.add_uint32(f"{A}.attention.head_count_kv", dhp["n_head_kv"])
    w.add_uint32(f"{A}.attention.key_length", dhp["head_dim"])
    w.add_uint32(f"{A}.attention.value_length", dhp["head_dim"])
    w.add_float32(f"{A}.rope.freq_base", dhp["rope_base"])
    w.add_float32(f"{A}.attention.layer_norm_rms_epsilon", dhp["eps"])
    w.add_uint32(f"{A}.block_size", dhp["block_size"])
    w.add_array(f"{A}.target_layers", np.array(dhp["target_layers"], dtype=np.int32).tolist())
    w.add_uint32(f"{A}.attention.sliding_window", dhp["n_swa"])
    w.add_array(f"{A}.attention.sliding_window_pattern", [True] * dhp["n_layer"])
    add_tokenizer(w, tok_json, None)
    w.add_uint32("tokenizer.ggml.mask_token_id", common.MASK)

    w.add_tensor("fc.weight", mat(sd["fc.weight"], f32))
    w.add_tensor("enc.output_norm.weight", vec(sd["enc_norm"]))
    w.add_tensor("output_norm.weight", vec(sd["output_norm"]))
    for il in range(dhp["n_layer"]):
        p = f"layers.{il}."
        b = f"blk.{il}."
        w.add_tensor(b + "attn_norm.weight", vec(sd[p + "attn_norm"]))
        for n in ("attn_q", "attn_k", "attn_v", "attn_output"):
            w.add_tensor(b + n + ".weight", mat(sd[p + n + ".weight"], f32))
        w.add_tensor(b + "attn_q_norm.weight", vec(sd[p + "attn_q_norm"]))
        w.add_tensor(b + "attn_k_norm.weight", vec(sd[p + "attn_k_norm"]))
        w.add_tensor(b + "ffn_norm.weight", vec(sd[p + "ffn_norm"]))
        for n in ("ffn_gate", "ffn_up", "ffn_down"):
            w.add_tensor(b + n + ".weight", mat(sd[p + n + ".weight"], f32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt", required=True, help="target checkpoint (train_target.py)")
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--f32", action="store_true")
    ap.add_argument("--drafter", help="drafter checkpoint (train_drafter.py)")
    ap.add_argument("--drafter-out")
    a = ap.parse_args()
    ck = torch.load(a.ckpt, map_location="cpu")
    export_target(ck["model"], ck["hp"], a.tokenizer, a.out, a.f32, "Muse-Glimmer tiny (Shakespeare)")
    print("wrote", a.out)
    if a.drafter:
        dk = torch.load(a.drafter, map_location="cpu")
        export_drafter(dk["model"], ck["hp"], dk["dhp"], a.tokenizer, a.drafter_out, a.f32,
                       "Muse-Glimmer tiny DFlash drafter (Shakespeare)")
        print("wrote", a.drafter_out)


if __name__ == "__main__":
    main()
