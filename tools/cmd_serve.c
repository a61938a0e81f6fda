/* cmd_serve.c - `muse serve`: the OpenAI-compatible HTTP server (src/server, docs/server.md). */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include "cli.h"
#include "model_opts.h"
#include "gguf/gguf.h"
#include "media_opts.h"
#include "sampling_opts.h"
#include "spec_opts.h"
#include "server/adapter.h"
#include "server/server.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: muse serve --model FILE.gguf [options]\n"
            "\n"
            "  --host ADDR         address or host name to bind (default 127.0.0.1; 0.0.0.0 = every interface;\n"
            "                      a name such as localhost is resolved, its first address bound)\n"
            "  --port N            TCP port (default 8080; 0 = any free port)\n"
            "  --port-file FILE    write the bound port to FILE once listening\n"
            "  -np, --parallel N   slots: sequences generated in parallel, each with its own KV cache (default 4);\n"
            "                      -c is the context of each (default: the trained context, capped so that every\n"
            "                      slot's KV cache fits in the memory available). Several slots are batched: one\n"
            "                      forward per step takes a token of every generating slot and prompt chunks of\n"
            "                      the others (docs/server.md; with --draft-model too: each slot verifies in the steps)\n"
            "  -nocb, --no-cont-batching  every slot runs its own forward on its own thread (no batching)\n"
            "  --kv-pool N         batched: the slots' KV is paged from a pool of N cells (full-attention positions)\n"
            "                      shared by all: each slot may grow to -c, memory is taken as it is used and given\n"
            "                      back; a request the pool cannot hold gets 503. Default: a pool when -c is automatic\n"
            "                      and the memory available cannot give every slot the context one slot could have\n"
            "  --prefill-step N    batched: prompt rows per step while other slots take part (default 32; a prompt\n"
            "                      alone takes 4x): smaller lets the others' tokens and new prompts through sooner,\n"
            "                      larger prefills faster\n"
            "  --queue N           requests that may wait for a slot; beyond that 503 + Retry-After (default 64)\n"
            "  -a, --alias NAME    the model id in /v1/models and /api/tags (default: the file's base name)\n"
            "  --chat-template-file FILE\n"
            "                      chat template (Jinja) instead of the file's tokenizer.chat_template\n"
            "  --max-body BYTES    largest request body; larger ones get 413 (default 4194304; 33554432\n"
            "                      with a vision projector: images come base64-encoded)\n"
            "  --mmproj FILE       vision projector: image_url parts (data: URIs) in chat messages (default:\n"
            "                      the one *mmproj*.gguf beside the model, if there is exactly one)\n"
            "  --no-mmproj         serve text only (do not look for a projector)\n"
            "  --image-max-tokens N  at most N merged tokens per image (default 4096)\n"
            "  --api-key KEY       require `Authorization: Bearer KEY` on everything but /health and /\n"
            "                      (or set MUSE_API_KEY)\n"
            "  --max-connections N open HTTP connections (default 1024; held by an event loop, not a thread each)\n"
            "  --max-connections-per-ip N  open connections per client address (IPv6: per /64; default 1/4 of the above)\n"
            "  --read-timeout S    a request must arrive within S seconds of connecting (default 30; its head within 10)\n"
            "  --cors ORIGIN       send Access-Control-Allow-Origin to this origin (repeat, or comma-separate; '*' = any);\n"
            "                      default: no cross-origin access\n"
            "  --allow-host NAME   accept this Host name too on a loopback bind (repeatable; default: localhost,\n"
            "                      127.0.0.1, [::1] with the port)\n"
            "  --no-context-shift  a chat whose prompt leaves no room for the answer gets a 400 (default: its oldest\n"
            "                      turns are dropped - the system messages and the last user message stay;\n"
            "                      --context-shift)\n"
            "  --pooling P         how /v1/embeddings, /api/embed pool the final hidden states: mean, cls, last\n"
            "                      (default: the file's pooling_type, else last; none refuses them)\n"
            "  --test-script FILE  TEST ONLY: no model; play scripted outputs from FILE (docs/server.md)\n"
            "\n"
            "requests are logged on stderr, one line each (method, path, status, prompt/generated tokens, ms);\n"
            "-v adds the model's description and each request's slot, cache, queue, prefill and decode figures;\n"
            "--log-disable turns the request lines off.\n");
    sampling_opts_usage(f, SAMPLING_SERVE);
    spec_opts_usage(f);
    model_opts_usage(f);
}

/* The request log (server.h log hook): one line on stderr per request. */
static void log_line(void *ud, const char *line) {
    (void)ud;
    fprintf(stderr, "%s\n", line);
}

/*
 * --host NAME: a numeric address as it is, else the name's first address (IPv4 first, as
 * llama-server's `localhost` binds 127.0.0.1). False after an error message.
 */
static bool resolve_host(const char *name, char *out, size_t cap) {
    struct in6_addr a6;
    struct in_addr a4;
    if (inet_pton(AF_INET, name, &a4) == 1 || inet_pton(AF_INET6, name, &a6) == 1) {
        snprintf(out, cap, "%s", name);
        return true;
    }
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    int rc = getaddrinfo(name, NULL, &hints, &res);
    if (rc) {
        cli_err("--host %s: cannot resolve (%s)", name, gai_strerror(rc));
        return false;
    }
    const struct addrinfo *pick = res;
    for (const struct addrinfo *a = res; a; a = a->ai_next)
        if (a->ai_family == AF_INET) {
            pick = a;
            break;
        }
    const void *addr = pick->ai_family == AF_INET ? (const void *)&((struct sockaddr_in *)pick->ai_addr)->sin_addr
                                                  : (const void *)&((struct sockaddr_in6 *)pick->ai_addr)->sin6_addr;
    bool ok = inet_ntop(pick->ai_family, addr, out, (socklen_t)cap) != NULL;
    freeaddrinfo(res);
    if (!ok) cli_err("--host %s: cannot resolve", name);
    return ok;
}

int cmd_serve(int argc, char **argv) {
    struct muse_server_params p = muse_server_default_params();
    const char *script = NULL, *port_file = NULL, *alias = NULL, *template_path = NULL, *host_name = NULL;
    bool test_mode = false, no_batching = false;
    int prefill_step = 0;
    int64_t kv_pool = 0;
    int64_t v;
    bool max_body_given = false;
    struct media_opts md;
    media_opts_init(&md);
    char *found_mmproj = NULL;
    struct sampling_opts so;
    sampling_opts_init(&so, SAMPLING_SERVE);
    struct spec_opts spo;
    spec_opts_init(&spo);
    struct model_opts mo;
    model_opts_init(&mo);
    mo.cparams.n_ctx = 0; /* the automatic choice (muse_context_auto_n_ctx over the slots) */
    p.api_key = getenv("MUSE_API_KEY");
    enum { MAX_LIST = 32 };
    const char *cors[MAX_LIST], *hosts[MAX_LIST + 1];
    int pooling = -1; /* --pooling: the file's pooling_type, else last */
    p.cors_origins = cors;
    p.allow_hosts = hosts;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val;
        int r = sampling_opts_parse(&so, argc, argv, &i);
        if (r == 0) r = spec_opts_parse(&spo, argc, argv, &i);
        if (r == 0) r = model_opts_parse(&mo, argc, argv, &i);
        if (r == 0) r = media_opts_parse(&md, argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
#define NEXT()                                            \
    do {                                                  \
        if (!(val = cli_next(argc, argv, &i))) return 2;  \
    } while (0)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--test-script")) {
            NEXT();
            script = val;
            test_mode = true;
        } else if (!strcmp(a, "--host")) {
            NEXT();
            host_name = val;
        } else if (!strcmp(a, "--alias") || !strcmp(a, "-a")) {
            NEXT();
            if (!val[0] || strlen(val) > 200) return cli_usage_err("--alias needs a name of 1..200 bytes");
            alias = val;
        } else if (!strcmp(a, "--chat-template-file") || !strcmp(a, "--template")) {
            NEXT();
            template_path = val;
        } else if (!strcmp(a, "--port")) {
            NEXT();
            if (!cli_parse_int(a, val, 0, 65535, &v)) return 2;
            p.port = (int)v;
        } else if (!strcmp(a, "--port-file")) {
            NEXT();
            port_file = val;
        } else if (!strcmp(a, "--parallel") || !strcmp(a, "-np")) {
            NEXT();
            if (!cli_parse_int(a, val, 1, 256, &v)) return 2;
            p.n_slots = (int)v;
        } else if (!strcmp(a, "--kv-pool")) {
            NEXT();
            if (!cli_parse_int(a, val, 1, UINT32_MAX, &v)) return 2;
            kv_pool = v;
        } else if (!strcmp(a, "--prefill-step")) {
            NEXT();
            if (!cli_parse_int(a, val, 1, 65536, &v)) return 2;
            prefill_step = (int)v;
        } else if (!strcmp(a, "--no-cont-batching") || !strcmp(a, "-nocb")) {
            no_batching = true;
        } else if (!strcmp(a, "--cont-batching") || !strcmp(a, "-cb")) {
            no_batching = false;
        } else if (!strcmp(a, "--queue")) {
            NEXT();
            if (!cli_parse_int(a, val, 0, 100000, &v)) return 2;
            p.queue = (int)v;
        } else if (!strcmp(a, "--max-body")) {
            NEXT();
            if (!cli_parse_int(a, val, 1024, (int64_t)1 << 34, &v)) return 2;
            p.max_body = (size_t)v;
            max_body_given = true;
        } else if (!strcmp(a, "--max-connections")) {
            NEXT();
            if (!cli_parse_int(a, val, 1, 100000, &v)) return 2;
            p.max_connections = (int)v;
        } else if (!strcmp(a, "--max-connections-per-ip")) {
            NEXT();
            if (!cli_parse_int(a, val, 1, 100000, &v)) return 2;
            p.max_connections_per_addr = (int)v;
        } else if (!strcmp(a, "--read-timeout")) {
            NEXT();
            if (!cli_parse_int(a, val, 1, 86400, &v)) return 2;
            p.read_timeout_s = (int)v;
        } else if (!strcmp(a, "--cors") || !strcmp(a, "--allow-host")) {
            NEXT(); /* the server splits comma-separated lists */
            bool c = !strcmp(a, "--cors");
            if ((c ? p.n_cors : p.n_allow_hosts) == MAX_LIST) {
                fprintf(stderr, "muse serve: %s given more than %d times\n", a, MAX_LIST);
                return 2;
            }
            if (c) cors[p.n_cors++] = val;
            else hosts[p.n_allow_hosts++] = val;
        } else if (!strcmp(a, "--api-key")) {
            NEXT();
            p.api_key = val;
        } else if (!strcmp(a, "--context-shift") || !strcmp(a, "--no-context-shift")) {
            p.context_shift = a[2] == 'c';
        } else if (!strcmp(a, "--pooling")) {
            NEXT();
            if ((pooling = muse_pooling_from_name(val)) < 0)
                return cli_usage_err("bad value for --pooling: '%s' (expected mean, cls, last or none)", val);
        } else {
            return cli_unknown(a);
        }
#undef NEXT
    }
    p.temperature = so.sp.temperature;
    p.top_p = so.sp.top_p;
    p.min_p = so.sp.min_p;
    p.top_k = so.sp.top_k;
    const char *model = mo.model_path;
    if (!model && !test_mode) return cli_usage_err("--model FILE is required");
    if (mo.kv_k >= 0 && mo.kv_v >= 0 && mo.kv_k != mo.kv_v) {
        cli_err("muse keeps keys and values in one type: -ctk %s and -ctv %s differ (give both, or --kv TYPE)",
                muse_kv_type_name((enum muse_kv_type)mo.kv_k), muse_kv_type_name((enum muse_kv_type)mo.kv_v));
        return 2;
    }
    if (mo.cparams.n_ctx && mo.cparams.n_ctx < 16) return cli_usage_err("--ctx-size must be 0 (automatic) or at least 16");
    char host[INET6_ADDRSTRLEN + 1] = "127.0.0.1";
    if (host_name && !resolve_host(host_name, host, sizeof host)) return 2;
    p.host = host;
    /* the name given is a Host the clients may send (DNS rebinding checks stay on for loopback) */
    if (host_name && strcmp(host_name, host)) hosts[p.n_allow_hosts++] = host_name;
    if (mo.verbosity >= 0) {
        p.log = log_line;
        p.log_verbose = mo.verbosity > 0;
    }
    char *tmpl = NULL;
    size_t tmpl_len = 0;
    if (template_path && !(tmpl = cli_read_file(template_path, &tmpl_len))) {
        cli_err("%s: cannot read the chat template", template_path);
        return 1;
    }
    if (md.n_images > 0) {
        media_opts_free(&md);
        return cli_usage_err("--image is for run, chat, logits and bench: clients send images in their requests");
    }
    if (md.no_mmproj && md.mmproj) return cli_usage_err("--no-mmproj cannot be combined with --mmproj");
    const char *mmproj = md.mmproj;
    if (!mmproj && !md.no_mmproj && !test_mode) {
        struct muse_error ferr;
        if ((mmproj = found_mmproj = media_find_mmproj(model, &ferr)))
            cli_err("using the vision projector %s (found beside the model; --no-mmproj to serve text only)", mmproj);
    }
    if (mmproj && !max_body_given) p.max_body = (size_t)32 << 20;

    /* a missing or unreadable model fails here, before anything listens (the weights load after
     * `listening`, so /health can answer "loading" meanwhile) */
    if (!test_mode) {
        struct muse_gguf *g = NULL;
        struct muse_error gerr;
        if (muse_gguf_open(model, &g, &gerr) != MUSE_OK) {
            cli_err("%s", gerr.msg);
            free(tmpl);
            return 1;
        }
        muse_gguf_free(g);
    }

    /* every connection is a descriptor: lift the soft limit to the hard one (the server stays below it) */
    struct rlimit rl;
    if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }

    /* SIGINT/SIGTERM are taken by sigwait below; every thread started from here inherits the mask */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    struct muse_error err = {0};
    struct muse_server *srv = NULL;
    if (muse_server_create(&p, &srv, &err) != MUSE_OK) {
        fprintf(stderr, "muse serve: %s\n", err.msg);
        free(tmpl);
        return 1;
    }
    int port = muse_server_port(srv);
    fprintf(stderr, strchr(p.host, ':') ? "muse serve: listening on http://[%s]:%d (loading)\n"
                                         : "muse serve: listening on http://%s:%d (loading)\n",
            p.host, port);
    if (port_file) {
        FILE *f = fopen(port_file, "w");
        if (!f || fprintf(f, "%d\n", port) < 0 || fclose(f)) {
            fprintf(stderr, "muse serve: cannot write %s\n", port_file);
            muse_server_free(srv);
            free(tmpl);
            return 1;
        }
    }
    struct muse_srv_adapter ad = {0};
    muse_status st;
    if (test_mode) {
        fprintf(stderr, "muse serve: TEST MODE: scripted adapter, no model (%s)\n", script);
        st = muse_srv_scripted_adapter_create(script, &ad, &err);
    } else {
        model_opts_apply_ngl(&mo, &mo.cparams);
        struct muse_srv_model_params rp = {.n_ctx = (int)mo.cparams.n_ctx,
                                           .n_batch = (int)mo.cparams.n_batch,
                                           .draft_path = spo.draft_path,
                                           .spec = spo.sp,
                                           .cparams = &mo.cparams,
                                           .mparams = &mo.mparams,
                                           .n_slots = p.n_slots,
                                           .no_batching = no_batching,
                                           .prefill_step = prefill_step,
                                           .kv_pool = kv_pool,
                                           .alias = alias,
                                           .chat_template = tmpl,
                                           .chat_template_len = tmpl_len,
                                           .chat_template_path = template_path,
                                           .mmproj = mmproj,
                                           .image_max_tokens = (int)md.max_tokens,
                                           .pooling = pooling};
        st = muse_srv_model_adapter_create(model, &rp, &ad, &err);
    }
    if (st == MUSE_OK) st = muse_server_attach_adapter(srv, ad, &err);
    free(tmpl);
    free(found_mmproj);
    media_opts_free(&md);
    if (st != MUSE_OK) {
        fprintf(stderr, "muse serve: %s\n", err.msg);
        muse_server_free(srv);
        return 1;
    }
    struct muse_srv_adapter_info info;
    ad.ops->info(ad.self, &info);
    if (info.n_ctx_train > 0 && info.n_ctx > info.n_ctx_train && mo.verbosity >= 0)
        cli_err("warning: the context of a slot (%d positions) is larger than the model was trained for (%d): positions "
                "past it may give poor output",
                info.n_ctx, info.n_ctx_train);
    char pool[64] = "";
    if (info.kv_pool) snprintf(pool, sizeof pool, ", a KV pool of %lld cells", (long long)info.kv_pool);
    fprintf(stderr, "muse serve: ready: model '%s', %d slot(s) of %d tokens%s%s, queue %d%s\n", info.model_name, p.n_slots,
            info.n_ctx, info.batched ? " (batched)" : "", pool, p.queue, p.api_key ? ", API key required" : "");
    if (mo.verbosity > 0 && info.desc[0]) fprintf(stderr, "muse serve: %s\n", info.desc);
    int sig = 0;
    sigwait(&sigs, &sig);
    fprintf(stderr, "muse serve: %s: shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    muse_server_free(srv);
    fprintf(stderr, "muse serve: stopped\n");
    return 0;
}
