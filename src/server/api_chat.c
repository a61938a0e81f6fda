/*
 * api_chat.c - the prompt of a chat request, shared by the chat dialects (OpenAI's
 * /v1/chat/completions, Ollama's /api/chat and /api/generate): image_url parts decoded, the
 * messages rendered through the adapter's chat template, the result tokenized.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/data_uri.h"
#include "server/server_int.h"

/* ---- images: image_url content parts ------------------------------------------------------------ */

#define MEDIA_MARKER "<__media__>" /* llama.cpp's media marker; the adapter splits the prompt there */

/* The url of an image_url part: {"image_url": {"url": "..."}} or {"image_url": "..."}. */
static const char *part_url(const cJSON *part) {
    const cJSON *iu = cJSON_GetObjectItemCaseSensitive(part, "image_url");
    if (cJSON_IsString(iu)) return iu->valuestring;
    const cJSON *url = cJSON_GetObjectItemCaseSensitive(iu, "url");
    return cJSON_IsString(url) ? url->valuestring : NULL;
}

/* The decoded pixels all the images of one request may have: what one image may have in muse image
 * (2^26, 192 MiB as RGB), so a request of many small PNGs of huge blank images cannot make the
 * server allocate more (a queued request holds its pixels until its rows are made). */
#define REQUEST_MAX_PIXELS MUSE_IMAGE_MAX_PIXELS_DEFAULT

/* Decode one data: URI image within *budget pixels (decremented). On failure writes msg. */
static bool decode_data_uri(const char *url, int i, int k, int64_t *budget, struct muse_image *img, char *msg,
                            size_t cap) {
    struct muse_error err = {0};
    uint8_t *bytes = NULL;
    size_t n = 0;
    if (muse_srv_data_uri_decode(url, &bytes, &n, &err) != MUSE_OK) {
        snprintf(msg, cap, "messages[%d]: image %d: %.300s", i, k + 1, err.msg);
        return false;
    }
    muse_status st = *budget > 0 ? muse_image_decode(bytes, n, *budget, img, &err) : MUSE_ERR_UNSUPPORTED;
    free(bytes);
    if (st != MUSE_OK && (st == MUSE_ERR_UNSUPPORTED && *budget < REQUEST_MAX_PIXELS)) {
        snprintf(msg, cap, "messages[%d]: image %d: the images of one request may have %lld pixels in all (%lld left)",
                 i, k + 1, (long long)REQUEST_MAX_PIXELS, (long long)(*budget > 0 ? *budget : 0));
        return false;
    }
    if (st != MUSE_OK) {
        snprintf(msg, cap, "messages[%d]: image %d: %.300s", i, k + 1, err.msg);
        return false;
    }
    *budget -= (int64_t)img->width * img->height;
    return true;
}

/*
 * The images of a validated messages array. When there are none: *out_messages = NULL, *n = 0.
 * Else *out_messages is a copy of messages whose content arrays with images are strings: parts
 * joined by "\n", an image part as MEDIA_MARKER with no newline around it (llama-server's join),
 * and *images the decoded images in order. On failure (400) writes msg and returns false.
 */
static bool extract_images(bool vision, const cJSON *messages, cJSON **out_messages, struct muse_image **images, int *n,
                           char *msg, size_t cap) {
    *out_messages = NULL;
    *images = NULL;
    *n = 0;
    int total = 0, i = 0;
    const cJSON *m, *part;
    cJSON_ArrayForEach(m, messages) {
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        if (!cJSON_IsArray(content)) continue;
        cJSON_ArrayForEach(part, content) {
            const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
            if (strcmp(type->valuestring, "image_url")) continue;
            if (!part_url(part)) {
                snprintf(msg, cap, "messages[%d]: an image_url part needs image_url.url (a data: URI)", i);
                return false;
            }
            if (!vision) {
                snprintf(msg, cap, "messages[%d]: this server has no vision projector, so it takes no images (start it "
                         "with --mmproj FILE)", i);
                return false;
            }
            total++;
        }
        i++;
    }
    if (total == 0) return true;
    cJSON *copy = cJSON_Duplicate(messages, true);
    struct muse_image *imgs = calloc((size_t)total, sizeof *imgs);
    struct muse_srv_buf b = {0};
    int k = 0;
    int64_t budget = REQUEST_MAX_PIXELS;
    if (!copy || !imgs) {
        snprintf(msg, cap, "out of memory");
        goto fail;
    }
    i = 0;
    cJSON *mm;
    cJSON_ArrayForEach(mm, copy) {
        cJSON *content = cJSON_GetObjectItemCaseSensitive(mm, "content");
        bool has = false;
        cJSON_ArrayForEach(part, content)
            has |= !strcmp(cJSON_GetObjectItemCaseSensitive(part, "type")->valuestring, "image_url");
        if (cJSON_IsArray(content) && has) {
            b.len = 0;
            bool prev_text = false;
            cJSON_ArrayForEach(part, content) {
                const bool is_img = !strcmp(cJSON_GetObjectItemCaseSensitive(part, "type")->valuestring, "image_url");
                const char *t = is_img ? MEDIA_MARKER : cJSON_GetObjectItemCaseSensitive(part, "text")->valuestring;
                bool ok = (!prev_text || is_img || muse_srv_buf_append(&b, "\n", 1)) && muse_srv_buf_append(&b, t, strlen(t));
                if (!ok) {
                    snprintf(msg, cap, "out of memory");
                    goto fail;
                }
                if (is_img && !decode_data_uri(part_url(part), i, k, &budget, &imgs[k], msg, cap)) goto fail;
                k += is_img;
                prev_text = !is_img;
            }
            cJSON *str = cJSON_CreateString(muse_srv_buf_str(&b));
            if (!str) {
                snprintf(msg, cap, "out of memory");
                goto fail;
            }
            cJSON_ReplaceItemInObjectCaseSensitive(mm, "content", str);
        }
        i++;
    }
    muse_srv_buf_free(&b);
    *out_messages = copy;
    *images = imgs;
    *n = total;
    return true;
fail:
    for (int j = 0; j < k; j++) muse_image_free(&imgs[j]);
    free(imgs);
    muse_srv_buf_free(&b);
    cJSON_Delete(copy);
    return false;
}

/* ---- the prompt ---------------------------------------------------------------------------------- */

/* ---- the context shift: the oldest turns go when the prompt leaves no room for the answer ---------- */

/* Positions a chat keeps for its answer: max_tokens (at most half a slot), else a quarter of a slot
 * up to 256. */
static int answer_room(const struct muse_server *srv, const struct muse_srv_job *job) {
    const int n_ctx = srv->info.n_ctx;
    if (job->n_predict > 0) return job->n_predict < n_ctx / 2 ? job->n_predict : n_ctx / 2;
    return n_ctx / 4 < 256 ? n_ctx / 4 : 256;
}

static bool role_is(const cJSON *m, const char *role) {
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(m, "role");
    return cJSON_IsString(r) && !strcmp(r->valuestring, role);
}

/* Drop the oldest turn of messages (a copy the caller owns): the first message after the leading
 * system / developer ones and what follows it up to the next user message, never the last user
 * message. Returns the messages dropped (0: nothing can go). */
static int drop_oldest_turn(cJSON *messages) {
    const int n = cJSON_GetArraySize(messages);
    int first = 0, last_user = -1;
    while (first < n && (role_is(cJSON_GetArrayItem(messages, first), "system") ||
                         role_is(cJSON_GetArrayItem(messages, first), "developer")))
        first++;
    for (int i = n - 1; i >= first && last_user < 0; i--)
        if (role_is(cJSON_GetArrayItem(messages, i), "user")) last_user = i;
    int end = first + 1; /* [first, end) goes: up to the next user message */
    while (end < n && !role_is(cJSON_GetArrayItem(messages, end), "user")) end++;
    if (last_user < 0 || end > last_user) return 0;
    for (int i = first; i < end; i++) cJSON_DeleteItemFromArray(messages, first);
    return end - first;
}

/* A text prompt: rendered and tokenized into job; while it leaves less than answer_room and the
 * server shifts, the oldest turns go and it is rendered again. Replies itself on failure. */
static bool text_prompt(struct srv_req *r, struct muse_srv_chat_input in, char **prompt, struct muse_srv_job *job) {
    struct muse_server *srv = r->srv;
    cJSON *shifted = NULL;
    int dropped = 0;
    struct muse_error err = {0};
    for (;;) {
        free(job->prompt);
        job->prompt = NULL;
        if (srv->ad.ops->tokenize(srv->ad.self, *prompt, strlen(*prompt), false, true, &job->prompt, &job->n_prompt,
                                  &err) != MUSE_OK) {
            cJSON_Delete(shifted);
            muse_srv_reply_error(r, 500, "server_error", NULL, "tokenizer failed: %s", err.msg);
            return false;
        }
        if (!srv->p.context_shift || job->n_prompt + answer_room(srv, job) <= srv->info.n_ctx) break;
        if (!shifted && !(shifted = cJSON_Duplicate(in.messages, true))) break;
        const int k = drop_oldest_turn(shifted);
        char *p = NULL;
        in.messages = shifted;
        if (!k || srv->ad.ops->render_chat(srv->ad.self, &in, &p, &err) != MUSE_OK) break; /* as it is */
        dropped += k;
        free(*prompt);
        *prompt = p;
    }
    cJSON_Delete(shifted);
    job->n_shifted = dropped;
    return muse_srv_check_prompt(r, job);
}

bool muse_srv_chat_prompt(struct srv_req *r, const struct muse_srv_chat_input *chat, struct muse_srv_job *job) {
    struct muse_server *srv = r->srv;
    char msg[400] = "", *prompt = NULL;
    cJSON *media_messages = NULL;
    struct muse_image *images = NULL;
    int n_images = 0;
    bool ok = false;
    if (!extract_images(srv->info.vision && srv->ad.ops->media_prompt, chat->messages, &media_messages, &images,
                        &n_images, msg, sizeof msg)) {
        muse_srv_reply_error(r, 400, "invalid_request_error", "messages", "%s", msg);
        goto out;
    }
    struct muse_srv_chat_input in = *chat;
    if (media_messages) in.messages = media_messages;
    struct muse_error err = {0};
    if (srv->ad.ops->render_chat(srv->ad.self, &in, &prompt, &err) != MUSE_OK) {
        if (err.status == MUSE_ERR_TEMPLATE || err.status == MUSE_ERR_INVALID_ARG || err.status == MUSE_ERR_FORMAT)
            muse_srv_reply_error(r, 400, "invalid_request_error", "messages", "chat template: %s", err.msg);
        else
            muse_srv_reply_error(r, 500, "server_error", NULL, "chat template: %s", err.msg);
        goto out;
    }
    if (n_images > 0) {
        muse_status st = srv->ad.ops->media_prompt(srv->ad.self, prompt, strlen(prompt), images, n_images, &job->media,
                                                   &job->prompt, &job->n_prompt, &err);
        free(images); /* the pixels were taken */
        images = NULL;
        n_images = 0;
        if (st != MUSE_OK) {
            if (st == MUSE_ERR_NOMEM || st == MUSE_ERR_INTERNAL)
                muse_srv_reply_error(r, 500, "server_error", NULL, "%s", err.msg);
            else
                muse_srv_reply_error(r, 400, "invalid_request_error", "messages", "%s", err.msg);
            goto out;
        }
        job->media_free = srv->ad.ops->media_free;
        job->media_self = srv->ad.self;
        if (job->n_prompt >= srv->info.n_ctx) {
            muse_srv_reply_error(r, 400, "invalid_request_error", "messages",
                                 "the prompt is %d tokens (image rows included) but the context of a slot is %d "
                                 "tokens: send smaller images (or fewer), or start the server with a larger "
                                 "--ctx-size or a smaller --image-max-tokens",
                                 job->n_prompt, srv->info.n_ctx);
            goto out;
        }
        ok = true;
    } else {
        ok = text_prompt(r, in, &prompt, job);
    }
out:
    for (int k = 0; k < n_images; k++) muse_image_free(&images[k]);
    free(images);
    cJSON_Delete(media_messages);
    free(prompt);
    return ok;
}
