#!/usr/bin/env python3
"""train_tokenizer.py - the byte-level BPE of the tiny Muse-Glimmer model (Hugging Face
`tokenizers`, development only).

Pre-tokenizer: the llama4 (GPT-4o) regex, then GPT-2 byte-level mapping, as the real Muse-Glimmer
tokenizer.json does. Trained on train.txt plus the rendered training chats (so the chat headers
get merges) to N_BPE = 4084 tokens (256 bytes + 3828 merges); the 12 Muse special tokens take the
last ids 4084..4095. Writes OUT/tokenizer.json.
"""
import argparse
import json

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

import common


def build_untrained():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(common.LLAMA4_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    return tok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    a = ap.parse_args()
    rng = common.seeded_rng(1234)
    chats = [json.loads(l) for l in open(f"{a.data}/chat_train.jsonl")]
    chat_text = [common.random_chat_text(c, rng) for c in chats]
    # the special tokens' text must not be learned as BPE: strip them from the chat samples
    for s in common.SPECIALS:
        chat_text = [t.replace(s, "\n") for t in chat_text]
    train = open(f"{a.data}/train.txt").read().split("\n\n")

    tok = build_untrained()
    trainer = trainers.BpeTrainer(
        vocab_size=common.N_BPE, min_frequency=2, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    tok.train_from_iterator(train + chat_text, trainer=trainer)
    assert tok.get_vocab_size() == common.N_BPE, tok.get_vocab_size()
    tok.add_special_tokens(common.SPECIALS)
    assert tok.token_to_id("<|begin_of_text|>") == common.BOS
    assert tok.token_to_id("<|mask|>") == common.MASK
    tok.save(f"{a.data}/tokenizer.json")
    print("vocab", tok.get_vocab_size(), "ids", tok.encode("ROMEO:\nO, she doth teach the torches to burn bright!").ids)


if __name__ == "__main__":
    main()
