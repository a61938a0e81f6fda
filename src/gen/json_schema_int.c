/* json_schema_int.c - GBNF for integers within bounds (llama.cpp's build_min_max_int), for the
 * JSON Schema converter (json_schema.c). */
#include "gen/json_schema_int.h"

#include <stdlib.h>

static void digit_range(struct gbuf *b, char from, char to) {
    if (from == to) gbuf_printf(b, "[%c]", from);
    else gbuf_printf(b, "[%c-%c]", from, to);
}

static void more_digits(struct gbuf *b, int min_digits, int max_digits) {
    /* a bound beyond the 16-digit integers (a minimum of 10^17 and up) asks for more digits than
     * the decimal cap allows: its own digit count then, not an inverted {min,max} */
    if (max_digits < min_digits) max_digits = min_digits;
    gbuf_puts(b, "[0-9]");
    if (min_digits == max_digits && min_digits == 1) return;
    gbuf_printf(b, "{%d", min_digits);
    if (max_digits != min_digits) {
        gbuf_putc(b, ',');
        if (max_digits != INT32_MAX) gbuf_printf(b, "%d", max_digits);
    }
    gbuf_putc(b, '}');
}

static void uniform_range(struct gbuf *b, const char *from, const char *to) {
    size_t flen = strlen(from), tlen = strlen(to), i = 0;
    while (i < flen && i < tlen && from[i] == to[i]) i++;
    if (i > 0) gbuf_printf(b, "\"%.*s\"", (int)i, from);
    if (i < flen && i < tlen) {
        if (i > 0) gbuf_putc(b, ' ');
        size_t sub_len = flen - i - 1;
        if (sub_len > 0) {
            const char *from_sub = from + i + 1, *to_sub = to + i + 1;
            char zeros[32], nines[32];
            memset(zeros, '0', sub_len);
            memset(nines, '9', sub_len);
            zeros[sub_len] = nines[sub_len] = 0;
            bool to_reached = false;
            gbuf_putc(b, '(');
            if (!strcmp(from_sub, zeros)) {
                digit_range(b, from[i], (char)(to[i] - 1));
                gbuf_putc(b, ' ');
                more_digits(b, (int)sub_len, (int)sub_len);
            } else {
                gbuf_printf(b, "[%c] (", from[i]);
                uniform_range(b, from_sub, nines);
                gbuf_putc(b, ')');
                if (from[i] < to[i] - 1) {
                    gbuf_puts(b, " | ");
                    if (!strcmp(to_sub, nines)) {
                        digit_range(b, (char)(from[i] + 1), to[i]);
                        to_reached = true;
                    } else {
                        digit_range(b, (char)(from[i] + 1), (char)(to[i] - 1));
                    }
                    gbuf_putc(b, ' ');
                    more_digits(b, (int)sub_len, (int)sub_len);
                }
            }
            if (!to_reached) {
                gbuf_puts(b, " | ");
                digit_range(b, to[i], to[i]);
                gbuf_putc(b, ' ');
                uniform_range(b, zeros, to_sub);
            }
            gbuf_putc(b, ')');
        } else {
            gbuf_printf(b, "[%c-%c]", from[i], to[i]);
        }
    }
}

void muse_json_int_range(struct gbuf *b, int64_t min_value, int64_t max_value, int decimals_left, bool top_level) {
    bool has_min = min_value != INT64_MIN, has_max = max_value != INT64_MAX;
    char min_s[32], max_s[32];
    if (has_min && has_max) {
        if (min_value < 0 && max_value < 0) {
            gbuf_puts(b, "\"-\" (");
            muse_json_int_range(b, -max_value, -min_value, decimals_left, true);
            gbuf_putc(b, ')');
            return;
        }
        if (min_value < 0) {
            gbuf_puts(b, "\"-\" (");
            muse_json_int_range(b, 0, -min_value, decimals_left, true);
            gbuf_puts(b, ") | ");
            min_value = 0;
        }
        snprintf(min_s, sizeof min_s, "%lld", (long long)min_value);
        snprintf(max_s, sizeof max_s, "%lld", (long long)max_value);
        size_t min_digits = strlen(min_s), max_digits = strlen(max_s);
        for (size_t digits = min_digits; digits < max_digits; digits++) {
            char nines[32];
            memset(nines, '9', digits);
            nines[digits] = 0;
            uniform_range(b, min_s, nines);
            min_s[0] = '1';
            memset(min_s + 1, '0', digits);
            min_s[digits + 1] = 0;
            gbuf_puts(b, " | ");
        }
        uniform_range(b, min_s, max_s);
        return;
    }
    int less_decimals = decimals_left - 1 > 1 ? decimals_left - 1 : 1;
    if (has_min) {
        if (min_value < 0) {
            gbuf_puts(b, "\"-\" (");
            muse_json_int_range(b, INT64_MIN, -min_value, decimals_left, false);
            gbuf_puts(b, ") | [0] | [1-9] ");
            more_digits(b, 0, decimals_left - 1);
        } else if (min_value == 0) {
            if (top_level) {
                gbuf_puts(b, "[0] | [1-9] ");
                more_digits(b, 0, less_decimals);
            } else {
                more_digits(b, 1, decimals_left);
            }
        } else if (min_value <= 9) {
            char ch = (char)('0' + min_value), range_start = top_level ? '1' : '0';
            if (ch > range_start) {
                digit_range(b, range_start, (char)(ch - 1));
                gbuf_putc(b, ' ');
                more_digits(b, 1, less_decimals);
                gbuf_puts(b, " | ");
            }
            digit_range(b, ch, '9');
            gbuf_putc(b, ' ');
            more_digits(b, 0, less_decimals);
        } else {
            snprintf(min_s, sizeof min_s, "%lld", (long long)min_value);
            int len = (int)strlen(min_s);
            char ch = min_s[0];
            if (ch > '1') {
                digit_range(b, top_level ? '1' : '0', (char)(ch - 1));
                gbuf_putc(b, ' ');
                more_digits(b, len, less_decimals);
                gbuf_puts(b, " | ");
            }
            digit_range(b, ch, ch);
            gbuf_puts(b, " (");
            muse_json_int_range(b, strtoll(min_s + 1, NULL, 10), INT64_MAX, less_decimals, false);
            gbuf_putc(b, ')');
            if (ch < '9') {
                gbuf_puts(b, " | ");
                digit_range(b, (char)(ch + 1), '9');
                gbuf_putc(b, ' ');
                more_digits(b, len - 1, less_decimals);
            }
        }
        return;
    }
    if (max_value >= 0) {
        if (top_level) {
            gbuf_puts(b, "\"-\" [1-9] ");
            more_digits(b, 0, less_decimals);
            gbuf_puts(b, " | ");
        }
        muse_json_int_range(b, 0, max_value, decimals_left, true);
    } else {
        gbuf_puts(b, "\"-\" (");
        muse_json_int_range(b, -max_value, INT64_MAX, decimals_left, false);
        gbuf_putc(b, ')');
    }
}
