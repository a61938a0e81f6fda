/*
 * channel.h - streaming parser of Muse-Glimmer assistant output for the server
 * (tokenizer-and-chat.md section 4): splits what the model writes after the generation prompt
 * `<|start|>assistant` into reasoning (` to=self` bodies), content (` to=user` or bare
 * `<|message|>` bodies) and ATEM tool calls (` to=NAME` bodies), holding back anything that could
 * still be a marker. Malformed output degrades to content; it never fails.
 *
 * Feed text in any chunking: the emitted result is the same as feeding it in one piece.
 * One parser per request; not thread-safe.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

struct cJSON;

struct muse_srv_channel_sink {
    void *ud;
    void (*reasoning)(void *ud, const char *text, size_t n);
    void (*content)(void *ud, const char *text, size_t n);
    /* name: the function name; arguments: a JSON object text (typed per the tool's schema). */
    void (*tool_call)(void *ud, const char *name, const char *arguments);
};

struct muse_srv_channel;

/*
 * A new parser. parse = false: every byte is content, verbatim (raw completions). tools (may be
 * NULL; borrowed, must outlive the parser) types tool-call arguments. allow_calls = false
 * (tool_choice "none"): a ` to=NAME` message is content, never a call. NULL on allocation failure.
 */
struct muse_srv_channel *muse_srv_channel_new(bool parse, const struct cJSON *tools, bool allow_calls);
void muse_srv_channel_free(struct muse_srv_channel *ch);
/* Feed generated text; emits whatever is now unambiguous through sink. */
void muse_srv_channel_feed(struct muse_srv_channel *ch, const char *text, size_t n,
                           const struct muse_srv_channel_sink *sink);
/* End of generation: flush held-back text, complete or degrade an open tool call. */
void muse_srv_channel_finish(struct muse_srv_channel *ch, const struct muse_srv_channel_sink *sink);

/*
 * Parse one ATEM tool-call body (`<atem:function_calls><atem:invoke name="N">...`). On success
 * returns true with *name and *arguments (a JSON object text) malloc'd; false when malformed.
 */
bool muse_srv_atem_parse(const char *body, size_t n, const struct cJSON *tools, char **name, char **arguments);
