/*
 * page_vendor.c - third-party scripts of the chat page, compiled into `muse serve` so that the page
 * needs no network: marked (Markdown -> HTML, MIT), from Debian's libjs-marked, embedded at build
 * time (the Makefile generates muse_marked.h from /usr/share/javascript/marked/marked.min.js).
 */
#include <stddef.h>

#include "muse_marked.h"

const unsigned char *const muse_srv_page_marked_js = muse_marked_js;
const size_t muse_srv_page_marked_js_len = sizeof muse_marked_js - 1;
