"""common.py - shared pieces of the tiny Muse-Glimmer training scripts: special tokens, the chat
rendering (the exact strings muse's built-in Glimmer template renders), hyperparameters."""
import random

# The Muse special tokens, in the order muse's synthetic writer uses; they take the LAST ids of
# the vocabulary (n_vocab - 12 .. n_vocab - 1). All CONTROL (llama.cpp forces <|start|> and
# <|message|> to USER_DEFINED itself).
SPECIALS = [
    "<|begin_of_text|>", "<|end_of_text|>", "<|eom|>", "<|eot|>", "<|finetune_right_pad|>",
    "<|start|>", "<|message|>", "<|image_start|>", "<|image_end|>", "<|video|>", "<|patch|>",
    "<|mask|>",
]
N_VOCAB = 4096
N_BPE = N_VOCAB - len(SPECIALS)
BOS, EOS, EOM, EOT, PAD, START, MESSAGE = (N_BPE + i for i in range(7))
MASK = N_BPE + 11

# The llama4 / GPT-4o pre-tokenizer regex (tokenizer-and-chat.md section 2.4), original form.
LLAMA4_REGEX = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n/]*"
    r"|\s*[\r\n]+"
    r"|\s+(?!\S)"
    r"|\s+"
)

# Target model hyperparameters (models/README.md).
HP = dict(
    n_vocab=N_VOCAB, n_embd=256, n_layer=6, n_head=4, n_head_kv=2, head_dim=64, n_ff=512,
    n_ctx=1024, n_swa=128, swa_pattern=[True, True, False, True, True, False],
    rope_base=500000.0, eps=1e-5, post_eps=1e-8, softcap=20.0, qk_scale=3.87,
)
# The 30B uses 1/sqrt(hidden/256) (0.19611613); at hidden 256 that is 1.0, which would let an engine
# that drops the multiply pass unnoticed, so this model uses 0.5.
HP["logit_scale"] = 0.5

# DFlash drafter hyperparameters.
DHP = dict(
    n_layer=2, n_head=4, n_head_kv=2, head_dim=64, n_ff=768, block_size=8, n_swa=256,
    target_layers=[1, 3, 5], rope_base=500000.0, eps=1e-5,
)

DEFAULT_SYSTEM = "You are a helpful AI assistant.\nKnowledge cutoff: 2026-01-04."
RECIPIENTS = '# Valid recipients: "self", "user".'


def system_body(system, date, strength):
    """The system turn body the template renders (tokenizer-and-chat.md section 3.2)."""
    if system is None:
        body = DEFAULT_SYSTEM
        if date:
            body += "\nCurrent date: " + date + "."
        body += "\n\nReasoning strength: " + strength + "."
    else:
        body = system
        if "reasoning strength" not in system.lower():
            body += "\n\nReasoning strength: " + strength + "."
    return body + "\n\n" + RECIPIENTS


def render_chat(turns, system=None, date=None, strength="high", reasoning=None):
    """Render [user, assistant, user, assistant, ...] as the Glimmer template does, with the
    BOS text first. The LAST assistant turn carries `reasoning` (to=self ... <|eom|>) if given;
    earlier assistant turns are rendered from their content alone."""
    s = "<|begin_of_text|><|start|>system<|message|>" + system_body(system, date, strength) + "<|eot|>"
    for i, t in enumerate(turns):
        if i % 2 == 0:
            s += "<|start|>user<|message|>" + t + "<|eot|>"
        else:
            if reasoning is not None and i == len(turns) - 1:
                s += "<|start|>assistant to=self<|message|>" + reasoning + "<|eom|>"
            s += "<|start|>assistant to=user<|message|>" + t + "<|eot|>"
    return s


def title(name):
    return " ".join(w.capitalize() for w in name.split())


def random_chat_text(conv, rng):
    """One training conversation with random date / system / strength / reasoning choices."""
    date = None
    if rng.random() < 0.8:
        date = "%04d-%02d-%02d" % (rng.randint(2025, 2027), rng.randint(1, 12), rng.randint(1, 28))
    strength = rng.choice(["low", "medium", "high", "high", "xhigh"])
    user, asst = title(conv["user_speaker"]), title(conv["assistant_speaker"])
    system = None
    if rng.random() < 0.25:
        system = rng.choice([
            f"You are {asst}. Answer in verse.",
            f"You are {asst}, a character in a play by Shakespeare.",
            f"You are {asst}. The user is {user}.",
        ])
    reasoning = None
    if rng.random() < 0.5:
        reasoning = rng.choice([
            f"The user speaks as {user}. I answer as {asst}.",
            f"{user} speaks to me. I reply as {asst}.",
            f"I am {asst}, and I answer {user}.",
        ])
    turns = conv["turns"]
    return render_chat(turns, system, date, strength, reasoning)


def seeded_rng(seed):
    return random.Random(seed)
