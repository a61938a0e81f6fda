/* cmd_serve.c - `muse serve`: the OpenAI-compatible HTTP server (src/server, docs/server.md). */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "cli.h"
#include "gguf/gguf.h"
#include "sampling_opts.h"
#include "server/adapter.h"
#include "server/server.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: muse serve --model FILE.gguf [options]\n"
            "\n"
            "  --model FILE        the GGUF model to serve\n"
            "  --host ADDR         numeric address to bind (default 127.0.0.1; 0.0.0.0 = every interface)\n"
            "  --port N            TCP port (default 8080; 0 = any free port)\n"
            "  --port-file FILE    write the bound port to FILE once listening\n"
            "  -np, --parallel N   slots: sequences generated in parallel, each with its own KV cache (default 1)\n"
            "  --queue N           requests that may wait for a slot; beyond that 503 + Retry-After (default 64)\n"
            "  -c, --ctx-size N    context per slot in tokens (default: min(4096, the model's))\n"
            "  -b, --batch-size N  most tokens per forward call (default 512)\n"
            "  --max-body BYTES    largest request body; larger ones get 413 (default 4194304)\n"
            "  --api-key KEY       require `Authorization: Bearer KEY` on everything but /health and /\n"
            "                      (or set MUSE_API_KEY)\n");
    sampling_opts_usage(f, SAMPLING_SERVE);
    fprintf(f,
            "  --max-connections N open HTTP connections (default 1024; held by an event loop, not a thread each)\n"
            "  --max-connections-per-ip N  open connections per client address (IPv6: per /64; default 1/4 of the above)\n"
            "  --read-timeout S    a request must arrive within S seconds of connecting (default 30; its head within 10)\n"
            "  --cors ORIGIN       send Access-Control-Allow-Origin to this origin (repeat, or comma-separate; '*' = any);\n"
            "                      default: no cross-origin access\n"
            "  --allow-host NAME   accept this Host name too on a loopback bind (repeatable; default: localhost,\n"
            "                      127.0.0.1, [::1] with the port)\n"
            "  --test-script FILE  TEST ONLY: no model; play scripted outputs from FILE (docs/server.md)\n");
}

int cmd_serve(int argc, char **argv) {
    struct muse_server_params p = muse_server_default_params();
    const char *model = NULL, *script = NULL, *port_file = NULL;
    bool test_mode = false;
    int n_ctx = 0, n_batch = 0;
    int64_t v;
    struct sampling_opts so;
    sampling_opts_init(&so, SAMPLING_SERVE);
    p.api_key = getenv("MUSE_API_KEY");
    enum { MAX_LIST = 32 };
    const char *cors[MAX_LIST], *hosts[MAX_LIST];
    p.cors_origins = cors;
    p.allow_hosts = hosts;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val;
        int r = sampling_opts_parse(&so, argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
#define NEXT()                                            \
    do {                                                  \
        if (!(val = cli_next(argc, argv, &i))) return 2;  \
    } while (0)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--model") || !strcmp(a, "-m")) {
            NEXT();
            model = val;
        } else if (!strcmp(a, "--test-script")) {
            NEXT();
            script = val;
            test_mode = true;
        } else if (!strcmp(a, "--host")) {
            NEXT();
            p.host = val;
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
        } else if (!strcmp(a, "--queue")) {
            NEXT();
            if (!cli_parse_int(a, val, 0, 100000, &v)) return 2;
            p.queue = (int)v;
        } else if (!strcmp(a, "--ctx-size") || !strcmp(a, "-c")) {
            NEXT();
            if (!cli_parse_int(a, val, 16, 1 << 24, &v)) return 2;
            n_ctx = (int)v;
        } else if (!strcmp(a, "--batch-size") || !strcmp(a, "-b")) {
            NEXT();
            if (!cli_parse_int(a, val, 1, 1 << 16, &v)) return 2;
            n_batch = (int)v;
        } else if (!strcmp(a, "--max-body")) {
            NEXT();
            if (!cli_parse_int(a, val, 1024, (int64_t)1 << 34, &v)) return 2;
            p.max_body = (size_t)v;
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
        } else {
            return cli_unknown(a);
        }
#undef NEXT
    }
    p.temperature = so.sp.temperature;
    p.top_p = so.sp.top_p;
    p.min_p = so.sp.min_p;
    p.top_k = so.sp.top_k;
    if (!model && !test_mode) {
        return cli_usage_err("--model FILE is required");
    }

    /* a missing or unreadable model fails here, before anything listens (the weights load after
     * `listening`, so /health can answer "loading" meanwhile) */
    if (!test_mode) {
        struct muse_gguf *g = NULL;
        struct muse_error gerr;
        if (muse_gguf_open(model, &g, &gerr) != MUSE_OK) {
            cli_err("%s", gerr.msg);
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
        return 1;
    }
    int port = muse_server_port(srv);
    fprintf(stderr, "muse serve: listening on http://%s:%d (loading)\n", p.host, port);
    if (port_file) {
        FILE *f = fopen(port_file, "w");
        if (!f || fprintf(f, "%d\n", port) < 0 || fclose(f)) {
            fprintf(stderr, "muse serve: cannot write %s\n", port_file);
            muse_server_free(srv);
            return 1;
        }
    }
    struct muse_srv_adapter ad = {0};
    muse_status st;
    if (test_mode) {
        fprintf(stderr, "muse serve: TEST MODE: scripted adapter, no model (%s)\n", script);
        st = muse_srv_scripted_adapter_create(script, &ad, &err);
    } else {
        struct muse_srv_model_params rp = {n_ctx, n_batch};
        st = muse_srv_model_adapter_create(model, &rp, &ad, &err);
    }
    if (st == MUSE_OK) st = muse_server_attach_adapter(srv, ad, &err);
    if (st != MUSE_OK) {
        fprintf(stderr, "muse serve: %s\n", err.msg);
        muse_server_free(srv);
        return 1;
    }
    fprintf(stderr, "muse serve: ready: %d slot(s), queue %d%s\n", p.n_slots, p.queue, p.api_key ? ", API key required" : "");
    int sig = 0;
    sigwait(&sigs, &sig);
    fprintf(stderr, "muse serve: %s: shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    muse_server_free(srv);
    fprintf(stderr, "muse serve: stopped\n");
    return 0;
}
