"""test_server_cache.py - the per-slot prompt cache of `muse serve`: a follow-up turn reuses the
whole previous turn (visible in usage.prompt_tokens_details.cached_tokens and /metrics), two
conversations on two slots keep their own caches (slot choice by longest prefix), a long agent
transcript is not re-prefilled, and a sliding-window cache restarts from 0 where a rewind would
need overwritten window rows. TEST-ONLY scripted engine; standard library only."""
import time

from srvtest import SCRIPT, Server, check, report

CHAT = "/v1/chat/completions"


def chat(srv, messages, **kw):
    st, _, js = srv.request("POST", CHAT, dict({"messages": messages}, **kw))
    assert st == 200, js
    return js


def follow_up(msgs, reply):
    m = reply["choices"][0]["message"]
    return msgs + [{"role": "assistant", "content": m["content"], "reasoning_content": m["reasoning_content"]}]


def multi_turn():
    with Server(SCRIPT, "--parallel", "2") as srv:
        a1_msgs = [{"role": "user", "content": "conversation A, first question"}]
        a1 = chat(srv, a1_msgs)
        check(a1["usage"]["prompt_tokens_details"]["cached_tokens"] == 0, "first request: nothing cached")
        b1_msgs = [{"role": "system", "content": "You are B."}, {"role": "user", "content": "conversation B here"}]
        b1 = chat(srv, b1_msgs)
        # A's second turn: the slot holds A's prompt + the generated turn (all but the final stop token)
        a2_msgs = follow_up(a1_msgs, a1) + [{"role": "user", "content": "and a second one"}]
        a2 = chat(srv, a2_msgs)
        want = a1["usage"]["prompt_tokens"] + a1["usage"]["completion_tokens"] - 1
        got = a2["usage"]["prompt_tokens_details"]["cached_tokens"]
        check(got == want, f"A turn 2 reuses all of turn 1: cached {got}, want {want}")
        check(a2["timings"]["prompt_n"] == a2["usage"]["prompt_tokens"] - want, "only the new tokens are evaluated")
        # B's second turn lands on B's slot, not on A's (longest-prefix slot choice)
        b2_msgs = follow_up(b1_msgs, b1) + [{"role": "user", "content": "B again"}]
        b2 = chat(srv, b2_msgs)
        want_b = b1["usage"]["prompt_tokens"] + b1["usage"]["completion_tokens"] - 1
        check(b2["usage"]["prompt_tokens_details"]["cached_tokens"] == want_b,
              f"B turn 2 on its own slot: cached {b2['usage']['prompt_tokens_details']['cached_tokens']}, want {want_b}")
        # the identical request again: everything but the last prompt token comes from the cache
        b3 = chat(srv, b2_msgs)
        check(b3["usage"]["prompt_tokens_details"]["cached_tokens"] == b3["usage"]["prompt_tokens"] - 1,
              "repeat request: all but one token cached")
        m = srv.metrics()
        total_cached = sum(r["usage"]["prompt_tokens_details"]["cached_tokens"] for r in (a1, b1, a2, b2, b3))
        check(m["muse_prompt_tokens_cached_total"] == total_cached,
              f"/metrics cached tokens {m['muse_prompt_tokens_cached_total']} == sum of usage {total_cached}")
        check(m["muse_prompt_cache_hits_total"] >= 3, f"/metrics cache hits {m['muse_prompt_cache_hits_total']}")
        total_prompt = sum(r["usage"]["prompt_tokens"] for r in (a1, b1, a2, b2, b3))
        check(m["muse_prompt_tokens_evaluated_total"] == total_prompt - total_cached, "/metrics evaluated tokens")
        # streaming reports cached tokens too
        st, _, _ = srv.request("POST", CHAT, {"messages": b2_msgs, "stream": True})
        check(st == 200, "stream after cache")


def agent_transcript():
    """A 12K-token agent transcript: turn N+1 must not re-prefill turn N (simulated 40 us/token prefill)."""
    script = dict(SCRIPT, n_ctx=32768, prefill_us_per_token=40)
    with Server(script) as srv:
        msgs = [{"role": "system", "content": "You are an agent. " + "Tool docs. " * 1000}]
        msgs.append({"role": "user", "content": "start " + "context " * 400})
        first = chat(srv, msgs)
        cold_ms = first["timings"]["prompt_ms"]
        for turn in range(3):
            msgs = follow_up(msgs, first) + [{"role": "user", "content": f"tool output {turn}: " + "data " * 200}]
            first = chat(srv, msgs)
            u = first["usage"]
            check(u["prompt_tokens"] > 12000 or turn < 2, f"transcript size {u['prompt_tokens']}")
            check(u["prompt_tokens_details"]["cached_tokens"] >= u["prompt_tokens"] - 1100,
                  f"turn {turn}: {u['prompt_tokens_details']['cached_tokens']} of {u['prompt_tokens']} cached")
        warm_ms = first["timings"]["prompt_ms"]
        check(warm_ms < cold_ms / 4, f"warm prefill {warm_ms:.0f} ms vs cold {cold_ms:.0f} ms")


def sliding_window():
    """Window 32 in a 64-row ring: rewinds of more than 33 positions after wrapping restart at 0."""
    base = list(range(1, 201))
    for n_swa, want in [(32, 0), (0, 150)]:
        script = dict(SCRIPT, n_swa=n_swa, ring_rows=2 * n_swa)
        with Server(script) as srv:
            def run(prompt):
                st, _, js = srv.request("POST", "/completion", {"prompt": prompt, "n_predict": 1})
                assert st == 200, js
                return js["tokens_cached"]
            check(run(base) == 0, "cold")
            got = run(base[:190] + [5, 5, 5])
            check(got == 190, f"n_swa {n_swa}: short rewind (10) keeps the prefix: {got}")
            got = run(base[:150] + [7])
            check(got == want, f"n_swa {n_swa}: rewind by 43 -> cached {got}, want {want}")
            got = run(base[:150] + [7, 8, 9])
            check(got == 151, f"n_swa {n_swa}: extending the cache keeps it all: {got}")
            m = srv.metrics()
            misses = 1 if n_swa else 0  # the rewind by 43 (the scripted slots keep no checkpoints)
            check(m["muse_swa_reprefills_total"] == misses and m["muse_swa_checkpoint_restores_total"] == 0,
                  f"n_swa {n_swa}: the sliding-window miss is counted: {m['muse_swa_reprefills_total']} re-prefills")


def main():
    t0 = time.time()
    multi_turn()
    agent_transcript()
    sliding_window()
    print(f"({time.time() - t0:.1f}s)")
    report("test_server_cache.py")


if __name__ == "__main__":
    main()
