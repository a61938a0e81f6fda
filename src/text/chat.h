/*
 * chat.h - the Muse-Glimmer conversation format: template context from messages, tools and
 * options; rendering with the model file's chat template or the built-in one; conversation state
 * for multi-turn chat. See docs/chat.md.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include <cJSON.h>

#include "text/jinja.h"
#include "muse.h"

/* The built-in template is text/glimmer_template.h (golden/chat/templates/muse-glimmer.jinja). */

#define MUSE_CHAT_DEFAULT_BOS "<|begin_of_text|>"
#define MUSE_CHAT_DEFAULT_EOS "<|end_of_text|>"

/* Parse the built-in template into *out (caller frees with muse_jinja_free). */
muse_status muse_chat_builtin_template(struct muse_jinja_template **out, struct muse_error *err);

/*
 * Build the render context transformers passes for a conversation in the golden format
 * ({"messages", "tools" (optional), "add_generation_prompt", "extra"}): messages, tools (the list,
 * or null when absent), documents (null), add_generation_prompt, bos_token, eos_token, then every
 * key of "extra". Returns a new cJSON object (caller deletes) or NULL with err set.
 */
cJSON *muse_chat_context_from_conversation(const cJSON *conv, const char *bos, const char *eos,
                                           struct muse_error *err);

/*
 * Canonical reasoning strength for `s`: "low", "medium", "high" or "xhigh" (case-insensitive),
 * else NULL. ("none"/"off" are not accepted: the model always reasons; map them to "low".)
 */
const char *muse_chat_reasoning_strength(const char *s);

/* Options for rendering a conversation with the Muse-Glimmer format. All fields optional. */
struct muse_chat_options {
    const char *system_prompt;   /* prepended as a system message unless the history has one */
    const char *reasoning;       /* low|medium|high|xhigh (NULL: template default, high) */
    const cJSON *tools;          /* OpenAI tools array ([{"type":"function","function":{...}}]) */
    const char *bos_token;       /* NULL: MUSE_CHAT_DEFAULT_BOS */
    const char *eos_token;       /* NULL: MUSE_CHAT_DEFAULT_EOS */
    /* Extra template variables (an object). "reasoning_effort" is accepted as an alias of
     * "reasoning_strength" (vLLM PR #54186); an explicit `reasoning` wins. */
    const cJSON *extra;
    struct muse_jinja_options jinja;
};

/* A conversation: the template it renders with plus its messages. Not thread-safe. */
struct muse_chat;

/*
 * Create a conversation rendered with `template_text` (`len` bytes; the model file's
 * tokenizer.chat_template) or, when template_text is NULL, the built-in Muse-Glimmer template.
 * Returns MUSE_ERR_TEMPLATE with line:column when the template does not parse.
 */
muse_status muse_chat_create(const char *template_text, size_t len, struct muse_chat **out,
                             struct muse_error *err);
void muse_chat_free(struct muse_chat *chat);

/* Drop every message (the template is kept). */
void muse_chat_reset(struct muse_chat *chat);

/* Number of messages. */
size_t muse_chat_n_messages(const struct muse_chat *chat);

/* Append {"role": role, "content": content}. Strings are copied. */
muse_status muse_chat_add(struct muse_chat *chat, const char *role, const char *content,
                          struct muse_error *err);

/* Append a message object (OpenAI format: role, content (string or parts), reasoning_content,
 * tool_calls with arguments as objects, name, tool_call_id ...). The object is deep-copied. */
muse_status muse_chat_add_json(struct muse_chat *chat, const cJSON *message, struct muse_error *err);

struct muse_output_parser;
/*
 * Append the assistant message a finished output parser holds: reasoning_content (when any),
 * content (null when empty and there are tool calls), tool_calls with arguments as JSON objects
 * (the template renders them as ATEM again). Errors: NOMEM.
 */
muse_status muse_chat_add_parsed(struct muse_chat *chat, const struct muse_output_parser *p,
                                 struct muse_error *err);

/* The messages array (owned by chat; do not modify). */
const cJSON *muse_chat_messages(const struct muse_chat *chat);

/*
 * Render the conversation into *out (malloc'd, NUL-terminated, caller frees; *out_len bytes).
 * add_generation_prompt appends `<|start|>assistant` for the model to continue. Errors raised by
 * the template come back as MUSE_ERR_TEMPLATE with their message.
 */
muse_status muse_chat_render(const struct muse_chat *chat, const struct muse_chat_options *opts,
                             bool add_generation_prompt, char **out, size_t *out_len,
                             struct muse_error *err);

/* Length of the common prefix of a and b (to reuse a KV cache across turns). */
size_t muse_chat_common_prefix(const char *a, size_t a_len, const char *b, size_t b_len);
