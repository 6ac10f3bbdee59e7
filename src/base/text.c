/* text.c - formatting helpers for reports. */
#include "base/text.h"

const char *bfit_thousands(double v, char *buf, size_t n)
{
    char t[48];
    int len = snprintf(t, sizeof t, "%.0f", v), j = 0;
    for (int i = 0; i < len && (size_t)j + 2 < n; i++) {
        if (i > 0 && t[i - 1] != '-' && (len - i) % 3 == 0)
            buf[j++] = ',';
        buf[j++] = t[i];
    }
    buf[j] = '\0';
    return buf;
}

const char *bfit_format_secs(double s, char *buf, size_t n)
{
    if (s < 1e-3)
        snprintf(buf, n, "%.0f us", s * 1e6);
    else if (s < 1)
        snprintf(buf, n, "%.2f ms", s * 1e3);
    else
        snprintf(buf, n, "%.2f s", s);
    return buf;
}

const char *bfit_format_duration(double s, char *buf, size_t n)
{
    long t = s > 0 ? (long)(s + 0.5) : 0;
    if (t < 60)
        snprintf(buf, n, "%ld s", t);
    else if (t < 3600)
        snprintf(buf, n, "%ld min %02ld s", t / 60, t % 60);
    else
        snprintf(buf, n, "%ld h %02ld min", t / 3600, t % 3600 / 60);
    return buf;
}

void bfit_xml_text(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '&')
            fputs("&amp;", f);
        else if (*s == '<')
            fputs("&lt;", f);
        else if (*s == '>')
            fputs("&gt;", f);
        else if (*s == '"')
            fputs("&quot;", f);
        else
            fputc(*s, f);
    }
}

const char *bfit_json_escape(const char *s, char *buf, size_t n)
{
    size_t j = 0;
    for (; *s && j + 7 < n; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            buf[j++] = '\\';
            buf[j++] = (char)c;
        } else if (c < 0x20) {
            j += (size_t)snprintf(buf + j, n - j, "\\u%04x", c);
        } else {
            buf[j++] = (char)c;
        }
    }
    if (n)
        buf[j < n ? j : n - 1] = '\0';
    return buf;
}

int bfit_utf8_len(const unsigned char *u, const unsigned char *end, unsigned *cp)
{
    unsigned c = u[0], v;
    int n;
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    if (c >= 0xC2 && c <= 0xDF)
        n = 2, v = c & 0x1F;
    else if ((c & 0xF0) == 0xE0)
        n = 3, v = c & 0x0F;
    else if (c >= 0xF0 && c <= 0xF4)
        n = 4, v = c & 0x07;
    else
        return 0;
    if (end - u < n)
        return 0;
    for (int i = 1; i < n; i++) {
        if ((u[i] & 0xC0) != 0x80)
            return 0;
        v = v << 6 | (u[i] & 0x3F);
    }
    if ((n == 3 && v < 0x800) || (n == 4 && (v < 0x10000 || v > 0x10FFFF)) || (v >= 0xD800 && v <= 0xDFFF))
        return 0;
    *cp = v;
    return n;
}

const char *bfit_dims_str(const int64_t *d, int n, const char *sep, char *buf, size_t len)
{
    size_t u = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < n && u < len; i++)
        u += (size_t)snprintf(buf + u, len - u, "%s%lld", i ? sep : "", (long long)d[i]);
    if (u < len)
        snprintf(buf + u, len - u, "]");
    return buf;
}
