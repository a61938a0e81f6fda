/*
 * api_llama.c - llama-server's informational endpoints that tools use: GET /props, GET /slots.
 * /apply-template is in api_openai.c (it shares the chat request's checks), the embeddings in
 * api_embed.c.
 */
#include <math.h>
#include <stdio.h>

#include "server/server_int.h"

/* a float setting as the decimal it was given (0.95, not 0.949999988) */
static double dec(float v) { return round((double)v * 1e6) / 1e6; }

static cJSON *generation_settings(struct muse_server *s) {
    cJSON *g = cJSON_CreateObject();
    cJSON_AddNumberToObject(g, "n_ctx", s->info.n_ctx);
    cJSON *p = cJSON_AddObjectToObject(g, "params");
    cJSON_AddNumberToObject(p, "temperature", dec(s->p.temperature));
    cJSON_AddNumberToObject(p, "top_k", s->p.top_k);
    cJSON_AddNumberToObject(p, "top_p", dec(s->p.top_p));
    cJSON_AddNumberToObject(p, "min_p", dec(s->p.min_p));
    cJSON_AddNumberToObject(p, "n_predict", -1);
    cJSON_AddNumberToObject(p, "seed", -1);
    cJSON_AddNumberToObject(p, "n_probs", 0);
    return g;
}

enum MHD_Result muse_srv_api_props(struct srv_req *r) {
    struct muse_server *s = r->srv;
    cJSON *root = cJSON_CreateObject();
    cJSON_AddItemToObject(root, "default_generation_settings", generation_settings(s));
    cJSON_AddNumberToObject(root, "total_slots", s->p.n_slots);
    cJSON_AddStringToObject(root, "model_alias", s->info.model_name);
    cJSON_AddStringToObject(root, "model_path", s->info.model_path);
    cJSON_AddStringToObject(root, "chat_template", s->info.chat_template ? s->info.chat_template : "");
    cJSON *m = cJSON_AddObjectToObject(root, "modalities");
    cJSON_AddBoolToObject(m, "vision", false);
    cJSON_AddBoolToObject(m, "audio", false);
    char build[96];
    snprintf(build, sizeof build, "muse %s (%s)", muse_version(), muse_build_commit());
    cJSON_AddStringToObject(root, "build_info", build);
    cJSON *ctx = cJSON_AddObjectToObject(root, "muse");
    cJSON_AddNumberToObject(ctx, "n_ctx_train", s->info.n_ctx_train);
    cJSON_AddNumberToObject(ctx, "n_vocab", s->info.n_vocab);
    cJSON_AddNumberToObject(ctx, "n_batch", s->info.n_batch);
    cJSON_AddNumberToObject(ctx, "n_threads", s->info.n_threads); /* per slot */
    cJSON_AddStringToObject(ctx, "kv_type", s->info.kv_type);
    cJSON_AddStringToObject(ctx, "model_desc", s->info.desc);
    return muse_srv_reply_json(r, 200, root);
}

enum MHD_Result muse_srv_api_slots(struct srv_req *r) {
    struct muse_server *s = r->srv;
    cJSON *root = cJSON_CreateArray();
    struct muse_srv_slot_state st;
    for (int i = 0; muse_srv_sched_slot(s->sched, i, &st); i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "id", i);
        cJSON_AddNumberToObject(o, "id_task", st.busy ? (double)(st.job_id & 0xffffff) : -1);
        cJSON_AddNumberToObject(o, "n_ctx", s->info.n_ctx);
        cJSON_AddBoolToObject(o, "speculative", false);
        cJSON_AddBoolToObject(o, "is_processing", st.busy);
        if (st.n_cache >= 0) cJSON_AddNumberToObject(o, "n_cached_tokens", st.n_cache);
        else cJSON_AddNullToObject(o, "n_cached_tokens");
        cJSON_AddNumberToObject(o, "n_past", st.n_past); /* KV cells the slot's tokens hold, also while busy */
        cJSON *g = generation_settings(s);
        cJSON_AddItemToObject(o, "params", cJSON_DetachItemFromObject(g, "params"));
        cJSON_Delete(g);
        cJSON_AddItemToArray(root, o);
    }
    return muse_srv_reply_json(r, 200, root);
}

