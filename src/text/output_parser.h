/*
 * output_parser.h - splits what a Muse-Glimmer model generates (after the generation prompt
 * `<|start|>assistant`) into reasoning (`to=self`), content (`to=user` or a bare/headerless
 * message) and ATEM tool calls (`to=NAME` + <atem:function_calls>), in batch or streaming mode.
 *
 * Streaming: feed token texts as they come; deltas are emitted as soon as they cannot be part of
 * a marker (<|start|> <|message|> <|eom|> <|eot|> <|end_of_text|>, a recipient header, an ATEM
 * tag at the start of a headerless message); tool calls are emitted once complete. Call
 * muse_output_parser_finish at the end (also on max_tokens: it flushes what was held back).
 * Malformed markup degrades to content, except a tool call cut off by the end, which is dropped
 * (muse_output_parser_cut_tool_call); the parser never fails on model output.
 * See spec/tokenizer-and-chat.md section 4 and docs/chat.md.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cJSON.h>

#include "muse.h"

enum muse_output_event_kind {
    MUSE_OUTPUT_REASONING,  /* text: a reasoning delta */
    MUSE_OUTPUT_CONTENT,    /* text: a content delta */
    MUSE_OUTPUT_TOOL_CALL,  /* name, arguments (a JSON object), id */
};

struct muse_output_event {
    enum muse_output_event_kind kind;
    const char *text;       /* REASONING / CONTENT delta (not NUL-terminated; len bytes) */
    size_t len;
    const char *name;       /* TOOL_CALL: function name (NUL-terminated) */
    const char *arguments;  /* TOOL_CALL: JSON object text, typed values, key order kept */
    const char *id;         /* TOOL_CALL: "<id_prefix><n>" */
};

/* Called for each event; pointers are valid only during the call. */
typedef void (*muse_output_callback)(void *user, const struct muse_output_event *ev);

struct muse_output_parser_params {
    /* Tools offered (OpenAI array) for typed arguments: a parameter whose schema allows
     * "string" keeps its raw text; others are parsed as JSON. NULL: untyped guessing (a value
     * that is valid JSON other than a string becomes that value, anything else a string). */
    const cJSON *tools;
    /* Reasoning extraction off: every byte after the prompt is content verbatim (llama.cpp's
     * behaviour with --reasoning-format none and no tools). */
    bool raw;
    /* Tool calls off (OpenAI tool_choice "none"): a `to=NAME` message or a headerless ATEM block
     * is content, streamed like any answer; no TOOL_CALL event is ever emitted. */
    bool no_tool_calls;
    /* Tool-call ids are id_prefix + a counter starting at first_call_index ("call_" when NULL);
     * give each conversation a distinct prefix so ids stay unique across turns. */
    const char *id_prefix;
    uint64_t first_call_index;
    muse_output_callback callback;  /* may be NULL (batch use: read the result) */
    void *user;
};

struct muse_output_parser;

/* Create a parser (copies what it needs from params except tools, which must outlive it). */
muse_status muse_output_parser_create(const struct muse_output_parser_params *params,
                                      struct muse_output_parser **out, struct muse_error *err);
void muse_output_parser_free(struct muse_output_parser *p);

/* Feed generated text (any split: bytes of a marker may arrive in several pieces). Markers are
 * recognized in the text. Returns MUSE_ERR_NOMEM only. */
muse_status muse_output_parser_feed(struct muse_output_parser *p, const char *text, size_t len);

/* Feed one token: when `special` is true its text is a control token (<|eom|> ...) and is
 * interpreted as a marker; otherwise it is literal text even if it spells one. */
muse_status muse_output_parser_feed_token(struct muse_output_parser *p, const char *text,
                                          size_t len, bool special);

/* End of generation (stop token, max_tokens, cancel): flush held-back text, finish the message. */
muse_status muse_output_parser_finish(struct muse_output_parser *p);

/* Accumulated result (valid until the parser is freed or fed again). */
const char *muse_output_parser_reasoning(const struct muse_output_parser *p, size_t *len);
const char *muse_output_parser_content(const struct muse_output_parser *p, size_t *len);
/* Array of {"id", "type": "function", "function": {"name", "arguments": "<JSON text>"}}. */
const cJSON *muse_output_parser_tool_calls(const struct muse_output_parser *p);
/* Whether the turn ended with <|eot|> / <|end_of_text|> (false: cut off or not finished). */
bool muse_output_parser_turn_ended(const struct muse_output_parser *p);
/* Whether finish cut a tool call short (its ATEM block incomplete): the part is dropped - neither
 * a TOOL_CALL nor content, so markup never reaches the answer; the caller reports the cut (OpenAI's
 * finish_reason "length"). A complete block missing only its end marker is still a call. */
bool muse_output_parser_cut_tool_call(const struct muse_output_parser *p);

/*
 * Parse one ATEM message body ("<atem:function_calls>\n<atem:invoke name=...>...") into a
 * function name and a JSON arguments object (caller frees both with free()). `tools` as above.
 * Returns MUSE_OK, MUSE_ERR_NOMEM, or MUSE_ERR_FORMAT when the body is not a well-formed single
 * call (a parameter given twice is ambiguous and also MUSE_ERR_FORMAT).
 */
muse_status muse_atem_parse(const char *body, size_t len, const cJSON *tools, char **name,
                            char **arguments);

/*
 * How an ATEM parameter's value is typed under its JSON schema: 1 the schema allows a string (the
 * raw text is kept), 0 it does not (the value is parsed as JSON), -1 unknown (no schema, no type:
 * JSON when it parses, else the raw text). The tool-call grammar (gen/tool_grammar.c) follows it.
 */
int muse_atem_schema_allows_string(const cJSON *schema);
