/* line_edit.c - libedit line input with history, or getline (line_edit.h). */
#include "line_edit.h"

#include <errno.h>
#include <histedit.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <wchar.h>

struct line_edit {
    EditLine *el;        /* NULL: getline */
    History *hist;
    char *hist_path;     /* NULL: no history file */
    const char *prompt;
    char *buf;           /* the line returned */
    size_t cap;
    volatile sig_atomic_t *flag; /* line_edit_watch: an interrupt is pending when *flag != 0 */
    int sig;
};

/*
 * Wait until standard input is readable or an interrupt is pending: 1 readable, -1 with errno
 * EINTR for an interrupt. The flag is checked with the signal blocked and ppoll unblocks it only
 * while waiting, so a signal that comes after the check still ends the wait.
 */
static int wait_input(struct line_edit *le) {
    if (!le->flag) return 1;
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, le->sig);
    for (;;) {
        pthread_sigmask(SIG_BLOCK, &block, &old);
        int r = 0, e = 0;
        const bool pending = *le->flag != 0;
        if (!pending) {
            sigset_t during = old;
            sigdelset(&during, le->sig);
            struct pollfd pfd = {.fd = STDIN_FILENO, .events = POLLIN};
            r = ppoll(&pfd, 1, NULL, &during);
            e = errno;
        }
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (pending || *le->flag) {
            errno = EINTR;
            return -1;
        }
        if (r > 0) return 1;
        if (r < 0 && e != EINTR) return 1; /* let the read report it */
    }
}

/* libedit's character reader (EL_GETCFN): wait_input, then a byte at a time until a whole
 * character (mbrtowc, as libedit's own reader; invalid bytes are dropped). 1, 0 at end of file,
 * -1 with errno (EINTR: interrupted). */
static int read_char(EditLine *el, wchar_t *wc) {
    struct line_edit *le = NULL;
    el_get(el, EL_CLIENTDATA, &le);
    char buf[MB_LEN_MAX];
    size_t n = 0;
    for (;;) {
        if (wait_input(le) < 0) return -1;
        const ssize_t k = read(STDIN_FILENO, buf + n, 1);
        if (k < 0 && errno == EINTR) continue; /* the flag decides, in wait_input */
        if (k <= 0) return (int)k;
        n++;
        mbstate_t st;
        memset(&st, 0, sizeof st);
        const size_t r = mbrtowc(wc, buf, n, &st);
        if (r == (size_t)-2 && n < sizeof buf) continue; /* an incomplete character */
        if (r == (size_t)-1 || r == (size_t)-2) {
            n = 0;
            continue;
        }
        if (r == 0) *wc = L'\0';
        return 1;
    }
}

static char *prompt_fn(EditLine *el) {
    struct line_edit *le = NULL;
    el_get(el, EL_CLIENTDATA, &le);
    return le && le->prompt ? (char *)le->prompt : "";
}

struct line_edit *line_edit_open(const char *prog) {
    struct line_edit *le = calloc(1, sizeof *le);
    if (!le) return NULL;
    const char *term = getenv("TERM");
    if (!isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO) || (term && !strcmp(term, "dumb"))) return le;
    le->el = el_init(prog, stdin, stdout, stderr);
    le->hist = history_init();
    if (!le->el || !le->hist) {
        if (le->el) el_end(le->el);
        if (le->hist) history_end(le->hist);
        le->el = NULL;
        le->hist = NULL;
        return le;
    }
    HistEvent ev;
    history(le->hist, &ev, H_SETSIZE, 1000);
    history(le->hist, &ev, H_SETUNIQUE, 1);
    el_set(le->el, EL_CLIENTDATA, le);
    el_set(le->el, EL_PROMPT, prompt_fn);
    el_set(le->el, EL_EDITOR, "emacs");
    el_set(le->el, EL_HIST, history, le->hist);
    el_set(le->el, EL_SIGNAL, 0); /* the caller's SIGINT handler decides */
    el_set(le->el, EL_GETCFN, read_char);
    el_source(le->el, NULL);      /* ~/.editrc, if any */
    const char *path = getenv("MUSE_HISTORY");
    if (path) {
        if (*path) le->hist_path = strdup(path);
    } else if (getenv("HOME") && asprintf(&le->hist_path, "%s/.muse_history", getenv("HOME")) < 0) {
        le->hist_path = NULL;
    }
    if (le->hist_path) history(le->hist, &ev, H_LOAD, le->hist_path); /* a missing file is fine */
    return le;
}

void line_edit_close(struct line_edit *le) {
    if (!le) return;
    if (le->el) el_end(le->el);
    if (le->hist) history_end(le->hist);
    free(le->hist_path);
    free(le->buf);
    free(le);
}

bool line_edit_is_tty(const struct line_edit *le) { return le->el != NULL; }

void line_edit_watch(struct line_edit *le, volatile sig_atomic_t *flag, int sig) {
    le->flag = flag;
    le->sig = sig;
}

static bool keep(struct line_edit *le, const char *s, size_t n) {
    if (n + 1 > le->cap) {
        char *nb = realloc(le->buf, n + 1);
        if (!nb) return false;
        le->buf = nb;
        le->cap = n + 1;
    }
    memcpy(le->buf, s, n);
    le->buf[n] = '\0';
    while (n > 0 && (le->buf[n - 1] == '\n' || le->buf[n - 1] == '\r')) le->buf[--n] = '\0';
    return true;
}

enum line_status line_edit_read(struct line_edit *le, const char *prompt, const char **line, bool *had_text) {
    if (had_text) *had_text = false;
    *line = NULL;
    if (le->el) {
        le->prompt = prompt;
        int n = 0;
        errno = 0;
        const char *s = el_gets(le->el, &n);
        if (!s || n <= 0) {
            if (errno == EINTR) {
                const LineInfo *li = el_line(le->el);
                if (had_text) *had_text = li && li->lastchar > li->buffer;
                fputc('\n', stdout);
                fflush(stdout);
                return LINE_INTERRUPT;
            }
            return LINE_EOF;
        }
        if (!keep(le, s, (size_t)n)) return LINE_EOF;
        *line = le->buf;
        return LINE_OK;
    }
    fputs(prompt, stdout);
    fflush(stdout);
    errno = 0;
    /* not a terminal: a pending interrupt is seen here, one during the read ends it (EINTR) */
    ssize_t n = le->flag && *le->flag ? (errno = EINTR, -1) : getline(&le->buf, &le->cap, stdin);
    if (n < 0) {
        if (errno == EINTR) {
            clearerr(stdin);
            fputc('\n', stdout);
            return LINE_INTERRUPT;
        }
        return LINE_EOF;
    }
    while (n > 0 && (le->buf[n - 1] == '\n' || le->buf[n - 1] == '\r')) le->buf[--n] = '\0';
    *line = le->buf;
    return LINE_OK;
}

void line_edit_add_history(struct line_edit *le, const char *line) {
    if (!le->hist || !line || !*line) return;
    HistEvent ev;
    history(le->hist, &ev, H_ENTER, line);
    if (le->hist_path) history(le->hist, &ev, H_SAVE, le->hist_path);
}
