/*
 * glimmer_template.h - the reference Muse-Glimmer chat template
 * (../shared/golden/chat/templates/muse-glimmer.jinja, byte for byte). `muse synth` writes it
 * into synthetic files as tokenizer.chat_template; the chat engine falls back to it when a
 * file carries no template. Generated into glimmer_template.c by scripts/embed_chat_template.sh.
 */
#pragma once

#include <stddef.h>

extern const char muse_glimmer_chat_template[];     /* NUL-terminated */
extern const size_t muse_glimmer_chat_template_len; /* bytes, without the NUL */
