// conv_choice.c - a convolution direction's kernel-choice record, written and read (core/conv_choice.h).
#include "core/conv_choice.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/check.h"

static const char *const ROUTE_TEXT[] = {"cudnn", "gemm", "own"};

const char *conv_choice_format(const ConvChoice *c, char out[CONV_CHOICE_TEXT_MAX]) {
    AMP_ASSERT(c->route >= CONV_ROUTE_CUDNN && c->route <= CONV_ROUTE_OWN && c->padded >= 0 &&
                   !(c->route == CONV_ROUTE_OWN && c->padded),
               "conv choice: route %d padded %d", (int)c->route, c->padded);
    int len;
    if (c->route == CONV_ROUTE_CUDNN)
        len = snprintf(out, CONV_CHOICE_TEXT_MAX, "cudnn algo=%d math=%s workspace=%zu", c->algo, c->math,
                       c->workspace);
    else
        len = snprintf(out, CONV_CHOICE_TEXT_MAX, "%s", ROUTE_TEXT[c->route]);
    if (c->padded && len >= 0 && len < CONV_CHOICE_TEXT_MAX)
        len += snprintf(out + len, (size_t)(CONV_CHOICE_TEXT_MAX - len), " padded=%d", c->padded);
    AMP_ASSERT(len > 0 && len < CONV_CHOICE_TEXT_MAX, "conv choice: record text too long");
    return out;
}

// *p past `word` when it starts there: 1; else 0 and *p unmoved.
static int take_word(const char **p, const char *word) {
    const size_t n = strlen(word);
    if (strncmp(*p, word, n) != 0) return 0;
    *p += n;
    return 1;
}

// A run of decimal digits at *p, at most max: 1 with *v and *p past it; else 0.
static int take_number(const char **p, unsigned long long max, unsigned long long *v) {
    const char *s = *p;
    unsigned long long n = 0;
    if (*s < '0' || *s > '9') return 0;
    for (; *s >= '0' && *s <= '9'; s++) {
        const unsigned digit = (unsigned)(*s - '0');
        if (n > (max - digit) / 10) return 0;
        n = n * 10 + digit;
    }
    *v = n;
    *p = s;
    return 1;
}

// A math type's name at *p (lowercase letters and '-', shorter than CONV_CHOICE_MATH_MAX) into math.
static int take_math(const char **p, char math[CONV_CHOICE_MATH_MAX]) {
    size_t n = 0;
    while (((*p)[n] >= 'a' && (*p)[n] <= 'z') || (*p)[n] == '-') n++;
    if (n == 0 || n >= CONV_CHOICE_MATH_MAX) return 0;
    memcpy(math, *p, n);
    math[n] = '\0';
    *p += n;
    return 1;
}

int conv_choice_parse(const char *text, ConvChoice *c) {
    memset(c, 0, sizeof *c);
    const char *p = text;
    unsigned long long v = 0;
    if (take_word(&p, "gemm")) {
        c->route = CONV_ROUTE_GEMM;
    } else if (take_word(&p, "own")) {
        c->route = CONV_ROUTE_OWN;
    } else {
        c->route = CONV_ROUTE_CUDNN;
        if (!take_word(&p, "cudnn algo=") || !take_number(&p, INT_MAX, &v)) return -1;
        c->algo = (int)v;
        if (!take_word(&p, " math=") || !take_math(&p, c->math)) return -1;
        if (!take_word(&p, " workspace=") || !take_number(&p, SIZE_MAX, &v)) return -1;
        c->workspace = (size_t)v;
    }
    if (take_word(&p, " padded=")) {
        if (c->route == CONV_ROUTE_OWN || !take_number(&p, INT_MAX, &v) || v == 0) return -1;
        c->padded = (int)v;
    }
    return *p == '\0' ? 0 : -1;
}
