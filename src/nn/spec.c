/* spec.c - the model spec parser (text -> bfit_graph_desc) and the shape
 * check that runs every layer's shape inference over the result.
 *
 * Each line is checked byte by byte first (binary garbage, control
 * characters, bad UTF-8, length), then split into words and interpreted.
 * Blocks are a stack of frames; a residual's add node is emitted when its
 * body (and optional shortcut) has ended, so nodes come out in topological
 * order without a second pass.
 */
#include "base/err.h"
#include "base/text.h"
#include "nn/spec.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXTOK 32  /* words on one line */
#define SHOWMAX 40 /* bytes of a word quoted in a message */

typedef struct tok {
    const char *s;
    int n;
} tok;

enum { FR_BODY, FR_SHORTCUT };

typedef struct frame {
    int kind;
    int in;           /* the value the block starts from */
    int body_end;     /* the body's last value (known once the body closed) */
    int line, col;    /* the `residual` keyword: the add node's place */
    int sline, scol;  /* the `shortcut` keyword */
} frame;

typedef struct parser {
    const char *src;
    bfit_graph_desc *g;
    int line;
    const char *ls;   /* first byte of the current line, for columns */
    int have_input;
    int cur;          /* the value the next layer reads */
    int depth;
    frame stack[BFIT_SPEC_MAXDEPTH];
    int pending;      /* a residual body just closed: `shortcut {` may follow */
    frame pend;
} parser;

/* ---- messages ------------------------------------------------------------ */

/* Columns count characters, not bytes: UTF-8 continuation bytes are skipped. */
static int col_of(const parser *p, const char *at)
{
    int col = 1;
    for (const char *q = p->ls; q < at; q++)
        col += ((unsigned char)*q & 0xC0) != 0x80;
    return col;
}

static int vfail_lc(const char *src, int line, int col, const char *fmt, va_list ap)
{
    char m[768];
    vsnprintf(m, sizeof m, fmt, ap);
    return bfit_fail(BFIT_EFORMAT, "%s:%d:%d: %s", src, line, col, m);
}

static int __attribute__((format(printf, 4, 5)))
fail_lc(const parser *p, int line, int col, const char *fmt, ...)
{
    va_list ap;
    int rc;
    va_start(ap, fmt);
    rc = vfail_lc(p->src, line, col, fmt, ap);
    va_end(ap);
    return rc;
}

static int __attribute__((format(printf, 3, 4))) fail_at(const parser *p, const char *at, const char *fmt, ...)
{
    va_list ap;
    int rc;
    va_start(ap, fmt);
    rc = vfail_lc(p->src, p->line, col_of(p, at), fmt, ap);
    va_end(ap);
    return rc;
}

/* A word for a message, cut to SHOWMAX bytes on a character boundary so a
 * megabyte of junk does not become a megabyte of message. */
static const char *show(tok t, char *buf, size_t len)
{
    int n = t.n;
    if (n <= SHOWMAX) {
        snprintf(buf, len, "%.*s", n, t.s);
        return buf;
    }
    n = SHOWMAX;
    while (n > 0 && ((unsigned char)t.s[n] & 0xC0) == 0x80)
        n--;
    snprintf(buf, len, "%.*s...", n, t.s);
    return buf;
}

static int is(tok t, const char *word)
{
    size_t n = strlen(word);
    return (size_t)t.n == n && memcmp(t.s, word, n) == 0;
}

/* Edit distance, case-insensitive, for "did you mean"; words are short. */
static int distance(tok t, const char *word)
{
    int d[33], n = t.n < 32 ? t.n : 32, m = (int)strlen(word);
    for (int j = 0; j <= n; j++)
        d[j] = j;
    for (int i = 1; i <= m; i++) {
        int diag = d[0];
        d[0] = i;
        for (int j = 1; j <= n; j++) {
            int up = d[j];
            int sub = diag + (tolower((unsigned char)t.s[j - 1]) != word[i - 1]);
            int best = up + 1 < d[j - 1] + 1 ? up + 1 : d[j - 1] + 1;
            d[j] = sub < best ? sub : best;
            diag = up;
        }
    }
    return t.n > 32 ? d[n] + (t.n - 32) : d[n];
}

/* The closest of words to t, or NULL when none is close enough to guess. */
static const char *closest(tok t, const char *const *words, int nwords)
{
    const char *best = NULL;
    int bestd = INT_MAX;
    for (int i = 0; i < nwords; i++) {
        int dd = distance(t, words[i]);
        if (dd < bestd) {
            bestd = dd;
            best = words[i];
        }
    }
    if (best && bestd <= 2 && bestd < (int)strlen(best) && bestd < t.n)
        return best;
    return NULL;
}

/* ---- bytes and words ----------------------------------------------------- */

/* A spec is text: report the first byte that is not (NUL, a control
 * character other than tab, malformed UTF-8), wherever it is. */
static int check_bytes(const parser *p, const char *s, const char *e)
{
    const unsigned char *u = (const unsigned char *)s, *end = (const unsigned char *)e;
    while (u < end) {
        unsigned c = *u, cp = 0;
        int n;
        if (c == 0)
            return fail_at(p, (const char *)u, "NUL byte: this looks like a binary file, not a model spec");
        if ((c < 0x20 && c != '\t') || c == 0x7F)
            return fail_at(p, (const char *)u, "control character 0x%02X: a model spec is plain text", c);
        if (c < 0x80) {
            u++;
            continue;
        }
        n = bfit_utf8_len(u, end, &cp);
        if (n == 0)
            return fail_at(p, (const char *)u, "byte 0x%02X is not valid UTF-8: a model spec is plain text", c);
        if (cp < 0xA0) /* C1 controls */
            return fail_at(p, (const char *)u, "control character U+%04X: a model spec is plain text", cp);
        u += n;
    }
    return BFIT_OK;
}

static int is_sep(char c) { return c == ' ' || c == '\t' || c == '#' || c == '{' || c == '}'; }

/* ---- numbers ------------------------------------------------------------- */

/* A whole number in [min, BFIT_SPEC_MAXINT]; what names it in messages. */
static int parse_int(const parser *p, tok t, int min, const char *what, int *out)
{
    char b[64];
    long long v = 0;
    int neg = t.n > 0 && t.s[0] == '-', i = neg; /* a sign only to say "at least" */

    if (t.n == 0)
        return fail_at(p, t.s, "expected a number for %s", what);
    if (i == t.n)
        goto bad;
    for (; i < t.n; i++) {
        if (t.s[i] < '0' || t.s[i] > '9')
            goto bad;
        if (v <= BFIT_SPEC_MAXINT)
            v = v * 10 + (t.s[i] - '0');
    }
    if (v > BFIT_SPEC_MAXINT)
        return fail_at(p, t.s, "`%s` is too large for %s (at most %d)", show(t, b, sizeof b), what, BFIT_SPEC_MAXINT);
    if (neg)
        v = -v;
    if (v < min)
        return fail_at(p, t.s, "%s must be at least %d, got `%s`", what, min, show(t, b, sizeof b));
    *out = (int)v;
    return BFIT_OK;
bad:
    return fail_at(p, t.s, "bad number `%s` for %s: expected a whole number", show(t, b, sizeof b), what);
}

/* A decimal number in the range lo..hi; lo_open/hi_open exclude the ends. */
static int parse_float(const parser *p, tok t, const char *what, double lo, int lo_open, double hi, int hi_open,
                       float *out)
{
    char b[64], num[64], *end;
    double v;

    if (t.n == 0 || t.n >= (int)sizeof num)
        goto bad;
    for (int i = 0; i < t.n; i++) /* no inf, nan or hex floats; t is not NUL-terminated */
        if (!strchr("0123456789.eE+-", t.s[i]) || t.s[i] == '\0')
            goto bad;
    memcpy(num, t.s, (size_t)t.n);
    num[t.n] = '\0';
    errno = 0;
    v = strtod(num, &end);
    if (end != num + t.n || !isfinite(v) || errno == ERANGE)
        goto bad;
    if ((lo_open ? v <= lo : v < lo) || (hi_open ? v >= hi : v > hi))
        return fail_at(p, t.s, "%s must be in %c%g, %g%c, got `%s`", what, lo_open ? '(' : '[', lo, hi,
                       hi_open ? ')' : ']', show(t, b, sizeof b));
    *out = (float)v;
    return BFIT_OK;
bad:
    return fail_at(p, t.s, "bad number `%s` for %s", show(t, b, sizeof b), what);
}

/* ---- layers and their options -------------------------------------------- */

enum { O_K, O_KH, O_KW, O_STRIDE, O_SH, O_SW, O_PAD, O_PH, O_PW, O_BIAS, O_P, O_EPS, O_MOM, O_VOCAB, O_POS,
       O_TYPES, O_CAUSAL, O_LEAN, O_TIE, O_STD, O_SLOPE, O_ALPHA, O_BETA, O_THRESHOLD, O_CEIL, O_CHANNELS,
       O_INIT, O_TANH, O_OFFSET, O_COUNT };
/* The cfg fields an option sets: giving one field twice is an error. */
enum { F_KH, F_KW, F_SH, F_SW, F_PH, F_PW, F_BIAS, F_P, F_EPS, F_MOM, F_VOCAB, F_POS, F_TYPES, F_CAUSAL, F_LEAN,
       F_TIE, F_STD, F_ALPHA, F_BETA, F_THRESHOLD, F_CEIL, F_CHANNELS, F_TANH, F_OFFSET, F_COUNT };
#define FB(f) (1u << (f))
#define OB(o) (1u << (o))

static const struct {
    const char *key;
    unsigned fields;
} opts[O_COUNT] = {
    [O_K] = {"k", FB(F_KH) | FB(F_KW)},
    [O_KH] = {"kh", FB(F_KH)},
    [O_KW] = {"kw", FB(F_KW)},
    [O_STRIDE] = {"stride", FB(F_SH) | FB(F_SW)},
    [O_SH] = {"sh", FB(F_SH)},
    [O_SW] = {"sw", FB(F_SW)},
    [O_PAD] = {"pad", FB(F_PH) | FB(F_PW)},
    [O_PH] = {"ph", FB(F_PH)},
    [O_PW] = {"pw", FB(F_PW)},
    [O_BIAS] = {"bias", FB(F_BIAS)},
    [O_P] = {"p", FB(F_P)},
    [O_EPS] = {"eps", FB(F_EPS)},
    [O_MOM] = {"momentum", FB(F_MOM)},
    [O_VOCAB] = {"vocab", FB(F_VOCAB)},
    [O_POS] = {"positions", FB(F_POS)},
    [O_TYPES] = {"types", FB(F_TYPES)},
    [O_CAUSAL] = {"causal", FB(F_CAUSAL)},
    [O_LEAN] = {"lean", FB(F_LEAN)},
    [O_TIE] = {"tie", FB(F_TIE)},
    [O_STD] = {"std", FB(F_STD)},
    [O_SLOPE] = {"slope", FB(F_ALPHA)},
    [O_ALPHA] = {"alpha", FB(F_ALPHA)},
    [O_BETA] = {"beta", FB(F_BETA)},
    [O_THRESHOLD] = {"threshold", FB(F_THRESHOLD)},
    [O_CEIL] = {"ceil", FB(F_CEIL)},
    [O_CHANNELS] = {"channels", FB(F_CHANNELS)},
    [O_INIT] = {"init", FB(F_ALPHA)},
    [O_TANH] = {"tanh", FB(F_TANH)},
    [O_OFFSET] = {"offset", FB(F_OFFSET)},
};

static const char *const field_names[F_COUNT] = {
    "the kernel height", "the kernel width", "the vertical stride", "the horizontal stride",
    "the vertical padding", "the horizontal padding", "bias", "the dropout probability", "eps", "momentum",
    "the vocabulary", "the positions", "the token types", "causal", "lean", "tie", "std", "the slope, alpha or initial value",
    "beta", "the threshold", "ceil", "the slopes", "tanh", "offset",
};

enum { P_NONE, P_UNITS, P_KERNEL, P_PROB, P_INDEX }; /* what a layer's one positional number is */

#define O_WINDOW (OB(O_K) | OB(O_KH) | OB(O_KW) | OB(O_STRIDE) | OB(O_SH) | OB(O_SW) | OB(O_PAD) | OB(O_PH) | OB(O_PW))

typedef struct layer_kw {
    const char *name;
    bfit_layer_kind kind;
    int pos;
    unsigned opts;
    const char *usage;
} layer_kw;

static const layer_kw layer_kws[] = {
    {"linear", BFIT_L_LINEAR, P_UNITS, OB(O_BIAS) | OB(O_TIE) | OB(O_STD), "linear N [bias=0|1] [tie=0|1] [std=S]"},
    {"conv", BFIT_L_CONV, P_UNITS, O_WINDOW | OB(O_BIAS), "conv N k=K [stride=S] [pad=P] [bias=0|1]"},
    {"maxpool", BFIT_L_MAXPOOL, P_KERNEL, O_WINDOW | OB(O_CEIL), "maxpool K [stride=S] [pad=P] [ceil=0|1]"},
    {"avgpool", BFIT_L_AVGPOOL, P_KERNEL, O_WINDOW, "avgpool K [stride=S] [pad=P]"},
    {"gap", BFIT_L_GAP, P_NONE, 0, "gap"},
    {"relu", BFIT_L_RELU, P_NONE, 0, "relu"},
    {"gelu", BFIT_L_GELU, P_NONE, OB(O_TANH), "gelu [tanh=0|1]"},
    {"sigmoid", BFIT_L_SIGMOID, P_NONE, 0, "sigmoid"},
    {"silu", BFIT_L_SILU, P_NONE, 0, "silu"},
    {"tanh", BFIT_L_TANH, P_NONE, 0, "tanh"},
    {"hardsigmoid", BFIT_L_HARDSIGMOID, P_NONE, 0, "hardsigmoid"},
    {"hardswish", BFIT_L_HARDSWISH, P_NONE, 0, "hardswish"},
    {"leakyrelu", BFIT_L_LEAKYRELU, P_NONE, OB(O_SLOPE), "leakyrelu [slope=S]"},
    {"elu", BFIT_L_ELU, P_NONE, OB(O_ALPHA), "elu [alpha=A]"},
    {"softplus", BFIT_L_SOFTPLUS, P_NONE, OB(O_BETA) | OB(O_THRESHOLD), "softplus [beta=B] [threshold=T]"},
    {"selu", BFIT_L_SELU, P_NONE, 0, "selu"},
    {"celu", BFIT_L_CELU, P_NONE, OB(O_ALPHA), "celu [alpha=A]"},
    {"prelu", BFIT_L_PRELU, P_NONE, OB(O_CHANNELS) | OB(O_SLOPE), "prelu [channels=1|C] [slope=S]"},
    {"layerscale", BFIT_L_LAYERSCALE, P_NONE, OB(O_INIT) | OB(O_CHANNELS), "layerscale [channels=1|C] [init=V]"},
    {"groupnorm", BFIT_L_GROUPNORM, P_UNITS, OB(O_EPS), "groupnorm G [eps=E]"},
    {"flatten", BFIT_L_FLATTEN, P_NONE, 0, "flatten"},
    {"select", BFIT_L_SELECT, P_INDEX, 0, "select I|last (token I's features, 0 the first; last: each sequence's last real token)"},
    {"dropout", BFIT_L_DROPOUT, P_PROB, OB(O_P), "dropout [p=P]"},
    {"batchnorm", BFIT_L_BATCHNORM, P_NONE, OB(O_EPS) | OB(O_MOM), "batchnorm [eps=E] [momentum=M]"},
    {"layernorm", BFIT_L_LAYERNORM, P_NONE, OB(O_EPS) | OB(O_BIAS), "layernorm [eps=E] [bias=0|1]"},
    {"rmsnorm", BFIT_L_RMSNORM, P_NONE, OB(O_EPS) | OB(O_OFFSET), "rmsnorm [eps=E] [offset=0|1]"},
    {"embed", BFIT_L_EMBED, P_UNITS, OB(O_VOCAB) | OB(O_POS) | OB(O_TYPES), "embed C vocab=V [positions=P] [types=K]"},
    {"attention", BFIT_L_ATTENTION, P_UNITS, OB(O_CAUSAL) | OB(O_LEAN) | OB(O_P),
     "attention H [causal=0|1] [lean=0|1] [p=P]"},
};
#define NLAYER_KWS ((int)(sizeof layer_kws / sizeof layer_kws[0]))

static const char *const keywords[] = {
    "input", "residual", "shortcut", "linear", "conv", "maxpool", "avgpool", "gap",
    "relu", "gelu", "sigmoid", "silu", "tanh", "hardsigmoid", "hardswish", "leakyrelu", "elu", "softplus", "selu", "celu",
    "prelu", "layerscale", "flatten", "dropout", "batchnorm", "layernorm", "rmsnorm", "groupnorm", "embed",
    "attention",
};
#define NKEYWORDS ((int)(sizeof keywords / sizeof keywords[0]))

/* Which option each cfg field was set by, to name both in a duplicate. */
typedef struct fset {
    tok by[F_COUNT];
} fset;

static int mark(const parser *p, fset *fs, unsigned fields, tok t)
{
    char b1[64], b2[64];
    for (int f = 0; f < F_COUNT; f++) {
        if (!(fields & FB(f)))
            continue;
        if (fs->by[f].s)
            return fail_at(p, t.s, "duplicate option: `%s` sets %s, already set by `%s` at column %d",
                           show(t, b1, sizeof b1), field_names[f], show(fs->by[f], b2, sizeof b2),
                           col_of(p, fs->by[f].s));
        fs->by[f] = t;
    }
    return BFIT_OK;
}

static int unknown_layer(const parser *p, tok t)
{
    char b[64];
    const char *guess;
    if (is(t, "add"))
        return fail_at(p, t.s, "`add` is not written in a spec: a `residual {` block adds its body to its input");
    if (is(t, "xent") || is(t, "softmax") || is(t, "loss"))
        return fail_at(p, t.s, "the softmax cross-entropy loss follows the last layer by itself; leave `%s` out",
                       show(t, b, sizeof b));
    guess = closest(t, keywords, NKEYWORDS);
    if (guess)
        return fail_at(p, t.s, "unknown layer `%s`; did you mean `%s`?", show(t, b, sizeof b), guess);
    return fail_at(p, t.s,
                   "unknown layer `%s` (known: linear, conv, maxpool, avgpool, gap, relu, gelu, sigmoid, silu, tanh, "
                   "hardsigmoid, hardswish, leakyrelu, elu, softplus, selu, celu, prelu, layerscale, flatten, dropout, "
                   "batchnorm, layernorm, rmsnorm, groupnorm, embed, attention, residual)",
                   show(t, b, sizeof b));
}

static int unknown_option(const parser *p, const layer_kw *kw, tok t, tok key)
{
    char b[64], list[192] = "";
    const char *words[O_COUNT], *guess;
    int n = 0;

    if (!kw->opts)
        return fail_at(p, t.s, "%s takes no options, got `%s`", kw->name, show(t, b, sizeof b));
    for (int o = 0; o < O_COUNT; o++) {
        if (kw->opts & OB(o)) {
            size_t len = strlen(list);
            snprintf(list + len, sizeof list - len, "%s%s", n ? ", " : "", opts[o].key);
            words[n++] = opts[o].key;
        }
    }
    guess = closest(key, words, n);
    if (guess)
        return fail_at(p, t.s, "%s has no option `%s`; did you mean `%s`? (options: %s)", kw->name,
                       show(key, b, sizeof b), guess, list);
    return fail_at(p, t.s, "%s has no option `%s` (options: %s)", kw->name, show(key, b, sizeof b), list);
}

/* What a layer's positional number is, in messages. */
static const char *units_name(bfit_layer_kind k)
{
    switch (k) {
    case BFIT_L_LINEAR: return "linear's output features";
    case BFIT_L_EMBED: return "embed's width";
    case BFIT_L_ATTENTION: return "attention's heads";
    case BFIT_L_GROUPNORM: return "groupnorm's groups";
    default: return "conv's output channels";
    }
}

static int positional(const parser *p, const layer_kw *kw, bfit_layer_cfg *c, fset *fs, tok t, int *have)
{
    char b[64];
    int v, rc;

    if (kw->pos == P_NONE)
        return fail_at(p, t.s, "unexpected `%s`: %s takes %s", show(t, b, sizeof b), kw->name,
                       kw->opts ? "only options (`key=value`)" : "no arguments");
    if (*have)
        return fail_at(p, t.s, "unexpected `%s`: usage is `%s`", show(t, b, sizeof b), kw->usage);
    *have = 1;
    switch (kw->pos) {
    case P_UNITS:
        return parse_int(p, t, 1, units_name(kw->kind), &c->units);
    case P_INDEX: /* select's token; last: each sequence's last real token (-1) */
        if (t.n == 4 && !memcmp(t.s, "last", 4)) {
            c->units = -1;
            return BFIT_OK;
        }
        return parse_int(p, t, 0, "select's token (or last)", &c->units);
    case P_KERNEL:
        if ((rc = mark(p, fs, FB(F_KH) | FB(F_KW), t)) != BFIT_OK)
            return rc;
        if ((rc = parse_int(p, t, 1, "the pooling kernel size", &v)) != BFIT_OK)
            return rc;
        c->kh = c->kw = v;
        return BFIT_OK;
    default: /* P_PROB */
        if ((rc = mark(p, fs, FB(F_P), t)) != BFIT_OK)
            return rc;
        return parse_float(p, t, "dropout's p", 0, 0, 1, 1, &c->p);
    }
}

/* leakyrelu's slope (prelu's initial one, layerscale's initial scale),
 * elu's and celu's alpha, softplus's beta and threshold: any finite
 * number, as PyTorch's; not 0 where it divides (softplus's beta, celu's
 * alpha) */
static int act_param(const parser *p, int o, tok val, bfit_layer_cfg *c)
{
    static const char *const what[] = {"leakyrelu's slope", "elu's alpha", "softplus's beta",
                                       "softplus's threshold"};
    int celu = c->kind == BFIT_L_CELU, divides = o == O_BETA || celu;
    const char *name = celu                            ? "celu's alpha"
                       : c->kind == BFIT_L_PRELU       ? "prelu's initial slope"
                       : c->kind == BFIT_L_LAYERSCALE  ? "layerscale's initial scale"
                                                       : what[o - O_SLOPE];
    float *f = o == O_BETA ? &c->beta : o == O_THRESHOLD ? &c->threshold : &c->alpha;
    char b[64];
    int rc = parse_float(p, val, name, -1e30, 1, 1e30, 1, f);

    if (rc == BFIT_OK && divides && *f == 0)
        return fail_at(p, val.s, "%s must not be 0 (%s divides by it), got `%s`", name, celu ? "celu" : "softplus",
                       show(val, b, sizeof b));
    return rc;
}

static int option(const parser *p, const layer_kw *kw, bfit_layer_cfg *c, fset *fs, tok t, const char *eq)
{
    char b[64];
    tok key = {t.s, (int)(eq - t.s)}, val = {eq + 1, (int)(t.s + t.n - eq - 1)};
    int o, v = 0, rc;

    if (key.n == 0)
        return fail_at(p, t.s, "`%s`: missing option name before `=`", show(t, b, sizeof b));
    for (o = 0; o < O_COUNT && !is(key, opts[o].key); o++)
        ;
    if (o == O_COUNT || !(kw->opts & OB(o)))
        return unknown_option(p, kw, t, key);
    if (val.n == 0)
        return fail_at(p, t.s, "option `%s` needs a value: `%s=...`", opts[o].key, opts[o].key);
    if ((rc = mark(p, fs, opts[o].fields, t)) != BFIT_OK)
        return rc;
    switch (o) {
    case O_K: case O_KH: case O_KW:
        rc = parse_int(p, val, 1, o == O_K ? "the kernel size (k)" : o == O_KH ? "kh" : "kw", &v);
        if (o != O_KW)
            c->kh = v;
        if (o != O_KH)
            c->kw = v;
        return rc;
    case O_STRIDE: case O_SH: case O_SW:
        rc = parse_int(p, val, 1, o == O_STRIDE ? "stride" : o == O_SH ? "sh" : "sw", &v);
        if (o != O_SW)
            c->sh = v;
        if (o != O_SH)
            c->sw = v;
        return rc;
    case O_PAD: case O_PH: case O_PW:
        rc = parse_int(p, val, 0, o == O_PAD ? "pad" : o == O_PH ? "ph" : "pw", &v);
        if (o != O_PW)
            c->ph = v;
        if (o != O_PH)
            c->pw = v;
        return rc;
    case O_BIAS: case O_CAUSAL: case O_LEAN: case O_TIE: case O_CEIL: case O_TANH: case O_OFFSET:
        if (!is(val, "0") && !is(val, "1"))
            return fail_at(p, val.s, "%s must be 0 or 1, got `%s`", opts[o].key, show(val, b, sizeof b));
        *(o == O_BIAS     ? &c->bias
          : o == O_CAUSAL ? &c->causal
          : o == O_LEAN   ? &c->lean
          : o == O_CEIL   ? &c->ceil
          : o == O_TANH   ? &c->tanh
          : o == O_OFFSET ? &c->offset
                          : &c->tie) = val.s[0] == '1';
        return BFIT_OK;
    case O_VOCAB:
        return parse_int(p, val, 1, "vocab", &c->vocab);
    case O_POS:
        return parse_int(p, val, 0, "positions", &c->positions);
    case O_CHANNELS: /* 1, or the input's channels: the layer checks which */
        return parse_int(p, val, 1, c->kind == BFIT_L_PRELU ? "prelu's channels (its slopes)"
                                                             : "layerscale's channels (its scales)", &c->units);
    case O_TYPES:
        return parse_int(p, val, 0, "types", &c->types);
    case O_P:
        return parse_float(p, val, c->kind == BFIT_L_ATTENTION ? "attention's dropout p" : "dropout's p", 0, 0, 1, 1,
                           &c->p);
    case O_EPS:
        return parse_float(p, val, "eps", 0, 1, 1, 0, &c->eps);
    case O_STD:
        return parse_float(p, val, "std (the weights' initial spread)", 0, 1, 1, 0, &c->std);
    case O_SLOPE: case O_ALPHA: case O_BETA: case O_THRESHOLD: case O_INIT:
        return act_param(p, o, val, c);
    default: /* O_MOM */
        return parse_float(p, val, "momentum", 0, 0, 1, 0, &c->momentum);
    }
}

/* ---- the graph being built ----------------------------------------------- */

static int add_node(parser *p, const bfit_layer_cfg *c, int in0, int in1, int line, int col)
{
    int id;
    if (p->g->nnodes >= BFIT_SPEC_MAXNODES)
        return fail_lc(p, line, col, "too many layers (at most %d)", BFIT_SPEC_MAXNODES);
    id = bfit_graph_add(p->g, c, in0, in1, line, col);
    if (id < 0)
        return bfit_fail_prefix(id, "%s:%d:%d: ", p->src, line, col);
    p->cur = id;
    return BFIT_OK;
}

/* The residual's add: body end + shortcut end (or the block's input). */
static int emit_add(parser *p, const frame *fr, int in1)
{
    bfit_layer_cfg c = bfit_layer_cfg_default(BFIT_L_ADD);
    p->pending = 0;
    return add_node(p, &c, fr->body_end, in1, fr->line, fr->col);
}

static int layer_line(parser *p, tok *t, int n)
{
    const layer_kw *kw = NULL;
    bfit_layer_cfg c;
    fset fs;
    int have = 0, rc;

    for (int i = 0; i < NLAYER_KWS; i++)
        if (is(t[0], layer_kws[i].name))
            kw = &layer_kws[i];
    if (!kw)
        return unknown_layer(p, t[0]);
    c = bfit_layer_cfg_default(kw->kind);
    memset(&fs, 0, sizeof fs);
    for (int i = 1; i < n; i++) {
        const char *eq = memchr(t[i].s, '=', (size_t)t[i].n);
        if (is(t[i], "{"))
            return fail_at(p, t[i].s, "`{` opens a block only after `residual` or `shortcut`");
        if (is(t[i], "}"))
            return fail_at(p, t[i].s, "`}` closes a block on a line of its own");
        rc = eq ? option(p, kw, &c, &fs, t[i], eq) : positional(p, kw, &c, &fs, t[i], &have);
        if (rc != BFIT_OK)
            return rc;
    }
    if (kw->pos == P_UNITS && !have)
        return fail_at(p, t[0].s, "%s needs %s: `%s`", kw->name,
                       kw->kind == BFIT_L_LINEAR      ? "its number of output features"
                       : kw->kind == BFIT_L_EMBED     ? "its width"
                       : kw->kind == BFIT_L_ATTENTION ? "its number of heads"
                       : kw->kind == BFIT_L_GROUPNORM ? "its number of groups"
                                                      : "its number of output channels",
                       kw->usage);
    if (kw->kind == BFIT_L_EMBED && !fs.by[F_VOCAB].s)
        return fail_at(p, t[0].s, "embed needs its vocabulary: `%s`", kw->usage);
    if (kw->opts & OB(O_K)) {
        if (!fs.by[F_KH].s && !fs.by[F_KW].s)
            return fail_at(p, t[0].s, "%s needs a kernel size: `%s`%s", kw->name, kw->usage,
                           kw->kind == BFIT_L_CONV ? " (or kh=A kw=B)" : "");
        if (!fs.by[F_KH].s || !fs.by[F_KW].s) {
            tok given = fs.by[F_KH].s ? fs.by[F_KH] : fs.by[F_KW];
            char b[64];
            return fail_at(p, given.s, "`%s` needs `%s=` too (or k=K for a square kernel)", show(given, b, sizeof b),
                           fs.by[F_KH].s ? "kw" : "kh");
        }
        if (kw->kind != BFIT_L_CONV) { /* pools step by their kernel unless told (PyTorch) */
            if (!fs.by[F_SH].s)
                c.sh = c.kh;
            if (!fs.by[F_SW].s)
                c.sw = c.kw;
        }
    }
    return add_node(p, &c, p->cur, -1, p->line, col_of(p, t[0].s));
}

/* `input tokens=T`: a sequence of T int32 token ids (an `embed` comes next). */
static int tokens_input(parser *p, tok *t, int n)
{
    char b[64];
    tok v = {t[1].s + 7, t[1].n - 7};
    int T, rc;

    if ((rc = parse_int(p, v, 1, "the tokens of the input", &T)) != BFIT_OK)
        return rc;
    if (n > 2)
        return fail_at(p, t[2].s, "unexpected `%s` after the input shape", show(t[2], b, sizeof b));
    p->g->input = bfit_shape_seq(T, 1);
    p->g->input_dtype = BFIT_I32;
    p->g->input_line = p->line;
    p->g->input_col = col_of(p, t[0].s);
    p->have_input = 1;
    p->cur = 0;
    return BFIT_OK;
}

static int input_line(parser *p, tok *t, int n)
{
    char b[64];
    int d[3], nd = 0, rc;
    const char *q, *e;

    if (p->have_input)
        return fail_at(p, t[0].s, "`input` given again (first at line %d): a model has one input",
                       p->g->input_line);
    if (n < 2)
        return fail_at(p, t[0].s, "`input` needs a shape: CxHxW for images (e.g. `input 1x28x28`), F for "
                                  "vectors (e.g. `input 784`) or tokens=T for token ids (e.g. `input tokens=256`)");
    if (t[1].n > 7 && memcmp(t[1].s, "tokens=", 7) == 0)
        return tokens_input(p, t, n);
    for (q = t[1].s, e = t[1].s + t[1].n;;) {
        const char *x = memchr(q, 'x', (size_t)(e - q));
        tok part = {q, (int)((x ? x : e) - q)};
        if (nd == 3)
            return fail_at(p, t[1].s, "input shape `%s` has more than 3 dimensions: use CxHxW or F",
                           show(t[1], b, sizeof b));
        if ((rc = parse_int(p, part, 1, "an input dimension", &d[nd++])) != BFIT_OK)
            return rc;
        if (!x)
            break;
        q = x + 1;
    }
    if (nd == 2)
        return fail_at(p, t[1].s, "input shape `%s` has 2 dimensions: use CxHxW (e.g. 1x%dx%d) or F",
                       show(t[1], b, sizeof b), d[0], d[1]);
    /* C x H first: each is at most INT_MAX, so three of them could pass 2^63 */
    if (nd == 3 && ((long long)d[0] * d[1] > INT_MAX || (long long)d[0] * d[1] * d[2] > INT_MAX))
        return fail_at(p, t[1].s, "input shape `%s` has %.0f values per sample (at most %d)", show(t[1], b, sizeof b),
                       (double)d[0] * d[1] * d[2], INT_MAX);
    if (n > 2)
        return fail_at(p, t[2].s, "unexpected `%s` after the input shape", show(t[2], b, sizeof b));
    p->g->input = nd == 1 ? bfit_shape_vec(d[0]) : bfit_shape_chw(d[0], d[1], d[2]);
    p->g->input_dtype = BFIT_F32;
    p->g->input_line = p->line;
    p->g->input_col = col_of(p, t[0].s);
    p->have_input = 1;
    p->cur = 0;
    return BFIT_OK;
}

/* `{` must end the line that opens a block: one layer per line. */
static int block_opener(const parser *p, tok *t, int n)
{
    char b[64];
    if (n < 2 || !is(t[1], "{"))
        return fail_at(p, n < 2 ? t[0].s : t[1].s, "`%s` opens a block: write `%s {` and end it with `}`",
                       is(t[0], "residual") ? "residual" : "shortcut", is(t[0], "residual") ? "residual" : "shortcut");
    if (n > 2)
        return fail_at(p, t[2].s, "unexpected `%s` after `{`: put each layer of a block on its own line",
                       show(t[2], b, sizeof b));
    if (p->depth == BFIT_SPEC_MAXDEPTH)
        return fail_at(p, t[0].s, "blocks nested more than %d deep", BFIT_SPEC_MAXDEPTH);
    return BFIT_OK;
}

static int open_residual(parser *p, tok *t, int n)
{
    frame *fr;
    int rc = block_opener(p, t, n);
    if (rc != BFIT_OK)
        return rc;
    fr = &p->stack[p->depth++];
    memset(fr, 0, sizeof *fr);
    fr->kind = FR_BODY;
    fr->in = p->cur;
    fr->line = p->line;
    fr->col = col_of(p, t[0].s);
    return BFIT_OK;
}

static int open_shortcut(parser *p, tok *t, int n)
{
    frame *fr;
    int rc;
    if (!p->pending)
        return fail_at(p, t[0].s, "`shortcut` must follow the `}` that closes a `residual` body");
    if ((rc = block_opener(p, t, n)) != BFIT_OK)
        return rc;
    fr = &p->stack[p->depth++];
    *fr = p->pend;
    fr->kind = FR_SHORTCUT;
    fr->sline = p->line;
    fr->scol = col_of(p, t[0].s);
    p->pending = 0;
    p->cur = fr->in;
    return BFIT_OK;
}

static int close_block(parser *p, tok *t, int n)
{
    char b[64];
    frame fr;

    if (p->depth == 0)
        return fail_at(p, t[0].s, "`}` without an open block");
    fr = p->stack[p->depth - 1];
    if (n > 1 && (!is(t[1], "shortcut") || fr.kind != FR_BODY))
        return fail_at(p, t[1].s, "unexpected `%s` after `}`: only `shortcut {` may follow the `}` of a residual body",
                       show(t[1], b, sizeof b));
    if (p->cur == fr.in)
        return fail_at(p, t[0].s, "empty %s: a block needs at least one layer",
                       fr.kind == FR_BODY ? "residual body" : "shortcut (leave it out for the identity)");
    p->depth--;
    if (fr.kind == FR_SHORTCUT)
        return emit_add(p, &fr, p->cur);
    p->pend = fr;
    p->pend.body_end = p->cur;
    p->pending = 1;
    return n > 1 ? open_shortcut(p, t + 1, n - 1) : BFIT_OK;
}

static int statement(parser *p, tok *t, int n)
{
    int rc;
    /* a closed residual body not followed by `shortcut` has the identity */
    if (p->pending && !is(t[0], "shortcut") && (rc = emit_add(p, &p->pend, p->pend.in)) != BFIT_OK)
        return rc;
    if (is(t[0], "}"))
        return close_block(p, t, n);
    if (is(t[0], "shortcut"))
        return open_shortcut(p, t, n);
    if (is(t[0], "input"))
        return input_line(p, t, n);
    if (!p->have_input) {
        char b[64];
        return fail_at(p, t[0].s, "a spec begins with `input CxHxW` or `input F` (e.g. `input 1x28x28`), not `%s`",
                       show(t[0], b, sizeof b));
    }
    if (is(t[0], "residual"))
        return open_residual(p, t, n);
    if (is(t[0], "{"))
        return fail_at(p, t[0].s, "`{` opens a block only after `residual` or `shortcut`");
    return layer_line(p, t, n);
}

static int do_line(parser *p, const char *s, const char *e)
{
    tok t[MAXTOK];
    int n = 0, rc;

    if ((rc = check_bytes(p, s, e)) != BFIT_OK)
        return rc;
    if (e - s > BFIT_SPEC_MAXLINE)
        return fail_at(p, s + BFIT_SPEC_MAXLINE, "line longer than %d bytes", BFIT_SPEC_MAXLINE);
    for (const char *q = s; q < e;) {
        if (*q == ' ' || *q == '\t') {
            q++;
            continue;
        }
        if (*q == '#')
            break;
        if (n == MAXTOK)
            return fail_at(p, q, "more than %d words on one line", MAXTOK);
        t[n].s = q;
        if (*q == '{' || *q == '}')
            q++;
        else
            while (q < e && !is_sep(*q))
                q++;
        t[n].n = (int)(q - t[n].s);
        n++;
    }
    return n ? statement(p, t, n) : BFIT_OK;
}

static int finish(parser *p)
{
    int rc;
    if (p->pending && (rc = emit_add(p, &p->pend, p->pend.in)) != BFIT_OK)
        return rc;
    if (p->depth > 0) {
        const frame *fr = &p->stack[p->depth - 1];
        if (fr->kind == FR_BODY)
            return fail_lc(p, fr->line, fr->col, "`residual {` is never closed: add `}` after its last layer");
        return fail_lc(p, fr->sline, fr->scol, "`shortcut {` is never closed: add `}` after its last layer");
    }
    if (!p->have_input)
        return fail_lc(p, 1, 1, "empty spec: expected `input CxHxW` or `input F`, then one layer per line");
    if (p->g->nnodes == 0)
        return fail_lc(p, p->g->input_line, p->g->input_col, "no layers after `input`: a model needs at least one");
    return BFIT_OK;
}

int bfit_spec_parse(const char *text, size_t len, const char *source_name, bfit_graph_desc *g)
{
    parser p;
    const char *s = text, *end = text + len;
    int rc;

    memset(&p, 0, sizeof p);
    p.src = source_name && *source_name ? source_name : "<spec>";
    p.g = g;
    bfit_graph_init(g, p.src);
    if (!text && len)
        return bfit_fail(BFIT_EINVAL, "%s: no text", p.src);
    if (len > BFIT_SPEC_MAXBYTES)
        return bfit_fail(BFIT_EFORMAT, "%s:1:1: %zu bytes is too large for a model spec (at most %u)", p.src, len,
                         BFIT_SPEC_MAXBYTES);
    if (len >= 3 && memcmp(s, "\xEF\xBB\xBF", 3) == 0) /* a UTF-8 byte-order mark */
        s += 3;
    while (s < end) {
        const char *nl = memchr(s, '\n', (size_t)(end - s)), *e = nl ? nl : end;
        p.line++;
        p.ls = s;
        if (e > s && e[-1] == '\r') /* CRLF */
            e--;
        if ((rc = do_line(&p, s, e)) != BFIT_OK)
            goto fail;
        s = nl ? nl + 1 : end;
    }
    if ((rc = finish(&p)) != BFIT_OK)
        goto fail;
    return BFIT_OK;
fail:
    bfit_graph_fini(g);
    return rc;
}

/* ---- shapes -------------------------------------------------------------- */

static void cat(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void cat(char *buf, size_t len, const char *fmt, ...)
{
    size_t n = strlen(buf);
    va_list ap;
    if (n + 1 >= len)
        return;
    va_start(ap, fmt);
    vsnprintf(buf + n, len - n, fmt, ap);
    va_end(ap);
}

/* A node as it would be written in a spec, for messages. */
static char *describe(const bfit_layer_cfg *c, char *buf, size_t len)
{
    int pool = c->kind == BFIT_L_MAXPOOL || c->kind == BFIT_L_AVGPOOL;
    int dsh = pool ? c->kh : 1, dsw = pool ? c->kw : 1;

    buf[0] = '\0';
    if (c->kind == BFIT_L_ADD) {
        cat(buf, len, "residual");
        return buf;
    }
    cat(buf, len, "%s", bfit_layer_kind_name(c->kind));
    if (c->kind == BFIT_L_LINEAR || c->kind == BFIT_L_EMBED || c->kind == BFIT_L_ATTENTION)
        cat(buf, len, " %d", c->units);
    if (c->kind != BFIT_L_CONV && !pool)
        return buf;
    if (c->kind == BFIT_L_CONV)
        cat(buf, len, " %d", c->units);
    if (c->kh != c->kw)
        cat(buf, len, " kh=%d kw=%d", c->kh, c->kw);
    else
        cat(buf, len, pool ? " %d" : " k=%d", c->kh);
    if (c->sh != c->sw)
        cat(buf, len, " sh=%d sw=%d", c->sh, c->sw);
    else if (c->sh != dsh || c->sw != dsw)
        cat(buf, len, " stride=%d", c->sh);
    if (c->ph != c->pw)
        cat(buf, len, " ph=%d pw=%d", c->ph, c->pw);
    else if (c->ph)
        cat(buf, len, " pad=%d", c->ph);
    if (c->ceil) /* PyTorch's ceil_mode (an ONNX MaxPool's): the output size differs */
        cat(buf, len, " ceil=1");
    return buf;
}

/* "file:line:col: " for nodes from a spec, "source: node i: " otherwise. */
static char *where(const bfit_graph_desc *g, int i, char *buf, size_t len)
{
    const bfit_node_desc *nd = &g->nodes[i];
    const char *src = g->source[0] ? g->source : "model";
    if (nd->line > 0)
        snprintf(buf, len, "%s:%d:%d: ", src, nd->line, nd->col);
    else
        snprintf(buf, len, "%s: node %d: ", src, i);
    return buf;
}

/* Body and shortcut of a residual differ: say both and how to project. */
static int add_mismatch(const bfit_graph_desc *g, int i, const bfit_shape *in)
{
    const bfit_node_desc *nd = &g->nodes[i];
    char w[320], s0[48], s1[48], fix[128] = "";
    bfit_shape a = in[0], b = in[1];

    bfit_shape_str(a, s0, sizeof s0);
    bfit_shape_str(b, s1, sizeof s1);
    where(g, i, w, sizeof w);
    if (nd->in[1] > nd->in[0]) /* shortcut nodes follow the body's */
        return bfit_fail(BFIT_EFORMAT, "%sresidual body gives %s but its shortcut gives %s: the shortcut must end in %s",
                         w, s0, s1, s0);
    if (a.nd == 2) /* a sequence [T, C]: per position */
        snprintf(fix, sizeof fix, "linear %d", a.d[1]);
    else if (a.h == 1 && a.w == 1)
        snprintf(fix, sizeof fix, "linear %d", a.c);
    else if (b.h % a.h == 0 && b.w % a.w == 0 && b.h / a.h == b.w / a.w && b.h / a.h > 1)
        snprintf(fix, sizeof fix, "conv %d k=1 stride=%d", a.c, b.h / a.h);
    else
        snprintf(fix, sizeof fix, "conv %d k=1", a.c);
    return bfit_fail(BFIT_EFORMAT,
                     "%sresidual body gives %s but its input is %s, and the identity shortcut cannot change shape: "
                     "add a projection after the body: `} shortcut {`, `%s`%s, `}`",
                     w, s0, s1, fix, a.nd == 2 ? "" : " (and `batchnorm`)");
}

int bfit_spec_check_shapes(const bfit_graph_desc *g)
{
    bfit_shape *v, in[BFIT_LAYER_MAXIN], last, out;
    bfit_layer *l;
    char err[512], w[320], d[128], s[48];
    int rc = BFIT_OK, i;

    if (g->nnodes < 1)
        return bfit_fail(BFIT_EFORMAT, "%s: the model has no layers", g->source[0] ? g->source : "model");
    v = malloc(((size_t)g->nnodes + 1) * sizeof *v);
    if (!v)
        return bfit_fail(BFIT_ENOMEM, "%s: out of host memory checking shapes", g->source);
    v[0] = g->input;
    for (i = 0; i < g->nnodes; i++) {
        const bfit_node_desc *nd = &g->nodes[i];
        int nin = nd->nin;

        for (int j = 0; j < nin; j++) {
            if (nd->in[j] < 0 || nd->in[j] > i) {
                rc = bfit_fail(BFIT_EFORMAT, "%sinput value %d is not made before this node", where(g, i, w, sizeof w),
                               nd->in[j]);
                goto free_values;
            }
            in[j] = v[nd->in[j]];
        }
        if (nin == 2 && !bfit_shape_eq(in[0], in[1])) {
            rc = add_mismatch(g, i, in);
            goto free_values;
        }
        rc = bfit_layer_new(&nd->cfg, NULL, in, nin, &l, err, sizeof err);
        if (rc == BFIT_ENOMEM) {
            bfit_fail_prefix(rc, "%s", where(g, i, w, sizeof w));
            goto free_values;
        }
        if (rc != BFIT_OK) {
            /* the usual slip: a linear layer straight after a conv stack */
            int hint = nd->cfg.kind == BFIT_L_LINEAR && (in[0].h > 1 || in[0].w > 1) && !strstr(err, "flatten");
            bfit_shape_str(in[0], s, sizeof s);
            rc = bfit_fail(BFIT_EFORMAT, "%s%s%s%s: %s%s", where(g, i, w, sizeof w), describe(&nd->cfg, d, sizeof d),
                           strstr(err, s) ? "" : " gets ", strstr(err, s) ? "" : s,
                           err[0] ? err : "the shapes do not fit", hint ? "; add `flatten` before it" : "");
            goto free_values;
        }
        out = l->out;
        bfit_layer_free(l);
        if (bfit_shape_numel(out) < 1 || bfit_shape_numel(out) > INT_MAX) {
            /* a guard behind the layers' own checks: nothing downstream
             * can work with an empty or absurd activation */
            rc = bfit_fail(BFIT_EFORMAT, "%s%s gets %s and would give %dx%dx%d: %s", where(g, i, w, sizeof w),
                           describe(&nd->cfg, d, sizeof d), bfit_shape_str(in[0], s, sizeof s), out.c, out.h, out.w,
                           bfit_shape_numel(out) < 1 ? "no values left (is the window larger than the "
                                                                 "padded input?)"
                                                               : "too many values per sample");
            goto free_values;
        }
        v[i + 1] = out;
    }
    last = v[g->nnodes];
    if (last.nd != 2 && (last.h != 1 || last.w != 1)) /* a sequence: scores per token */
        rc = bfit_fail(BFIT_EFORMAT,
                       "%sthe last layer gives %s, but the loss needs a vector of class scores: end with `flatten` "
                       "(or `gap`) and `linear N`",
                       where(g, g->nnodes - 1, w, sizeof w), bfit_shape_str(last, s, sizeof s));
free_values:
    free(v);
    return rc;
}

int bfit_spec_parse_file(const char *path, bfit_graph_desc *g)
{
    FILE *f;
    char *buf = NULL, *nb;
    size_t n = 0, cap = 0;
    int rc = BFIT_OK;

    bfit_graph_init(g, path);
    if (!path)
        return bfit_fail(BFIT_EINVAL, "model spec: no path given");
    f = fopen(path, "rb");
    if (!f)
        return bfit_fail(BFIT_EIO, "%s: cannot open: %s", path, strerror(errno));
    for (;;) { /* read to EOF: works for pipes, stops just past the size limit */
        size_t got;
        if (n == cap) {
            cap = cap ? cap * 2 : 65536;
            if (cap > (size_t)BFIT_SPEC_MAXBYTES + 1)
                cap = (size_t)BFIT_SPEC_MAXBYTES + 1;
            if (n == cap) {
                rc = bfit_fail(BFIT_EFORMAT, "%s: too large for a model spec (more than %u bytes)", path,
                               BFIT_SPEC_MAXBYTES);
                goto close_file;
            }
            nb = realloc(buf, cap);
            if (!nb) {
                rc = bfit_fail(BFIT_ENOMEM, "%s: out of host memory reading it", path);
                goto close_file;
            }
            buf = nb;
        }
        got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0)
            break;
    }
    if (ferror(f)) {
        rc = bfit_fail(BFIT_EIO, "%s: cannot read: %s", path, strerror(errno));
        goto close_file;
    }
    rc = bfit_spec_parse(buf, n, path, g);
    if (rc == BFIT_OK && (rc = bfit_spec_check_shapes(g)) != BFIT_OK)
        bfit_graph_fini(g);
close_file:
    fclose(f);
    free(buf);
    return rc;
}
