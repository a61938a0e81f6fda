/*
 * tool_grammar.h - the grammar of a forced Muse-Glimmer tool call (OpenAI tool_choice "required"
 * or a named function): what the model writes after the generation prompt `<|start|>assistant`,
 * in the ATEM form of spec/tokenizer-and-chat.md section 3.2:
 *
 *   [ to=self<|message|>REASONING<|eom|><|start|>assistant] to=NAME<|message|><atem:function_calls>
 *   <atem:invoke name="NAME">
 *   <atem:parameter name="K">V</atem:parameter>      (per parameter, in the schema's order)
 *   </atem:invoke>
 *   </atem:function_calls>                            (then only an end-of-turn token)
 *
 * One optional reasoning block (no "<|" inside) comes first. Parameters follow the function's
 * `parameters` schema: required ones always, optional ones may be left out; no others. Values
 * are typed as the output parser (text/output_parser.h) types them back: a parameter whose
 * schema allows "string" is raw text without '<' (an enum of strings: one of them; min/maxLength
 * bound its length), any other typed parameter is a JSON value under its schema
 * (gen/json_schema.h), and an untyped one is raw text. Errors (UNSUPPORTED, naming the tool and
 * parameter): a string parameter with a pattern or format, a schema the converter refuses.
 * The grammar names the special tokens as <|message|> <|eom|> <|start|>: compile it against the
 * model's tokenizer (muse_grammar_from_text).
 */
#pragma once

#include "muse.h"

struct cJSON;

/*
 * GBNF (*gbnf malloc'd) for a call of the tool named `name` (NULL: any tool of the list) from
 * `tools`, an OpenAI tools array ({"type": "function", "function": {"name", "parameters"}}).
 * Errors: INVALID_ARG (no such tool, a tool without a name), UNSUPPORTED, NOMEM.
 */
muse_status muse_tool_call_grammar(const struct cJSON *tools, const char *name, char **gbnf, struct muse_error *err);

/*
 * GBNF (*gbnf malloc'd) of a whole chat answer whose content is JSON under a schema (text, len
 * bytes): the same optional reasoning block, then " to=user<|message|>" and the schema's JSON
 * (gen/json_schema.h; then only an end-of-turn token). For a generation prompt that does not hold
 * the answer header already: constrained from the first token, any model gives valid JSON, also
 * one that would never write the header. Errors: FORMAT (not JSON), those of the schema
 * converter, NOMEM.
 */
muse_status muse_chat_json_grammar(const char *schema, size_t len, char **gbnf, struct muse_error *err);
