/* Reads a template build's progress from mmdebstrap's --verbose output: its "I: ..." step lines,
 * apt's "N newly installed", "Get:" (with the size in brackets) and dpkg's "Setting up". */
#include "domain/template_progress.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void template_progress_init(template_progress *p)
{
    memset(p, 0, sizeof *p);
    p->phase = "queued";
}

static bool starts(const char *line, size_t len, const char *prefix)
{
    size_t n = strlen(prefix);
    return len >= n && memcmp(line, prefix, n) == 0;
}

static bool contains(const char *line, size_t len, const char *what)
{
    size_t n = strlen(what);
    for (size_t i = 0; n <= len && i <= len - n; i++)
        if (memcmp(line + i, what, n) == 0)
            return true;
    return false;
}

/* The percent the progress stands for: update 0-5, download 5-40, install 40-90 (by packages),
 * setup 90, finish 95, ready 100. */
static int percent_of(const template_progress *p)
{
    int total = p->total_essential + p->total_rest;
    if (strcmp(p->phase, "ready") == 0)
        return 100;
    if (strcmp(p->phase, "finish") == 0)
        return 95;
    if (strcmp(p->phase, "setup") == 0)
        return 90;
    if (strcmp(p->phase, "install") == 0)
        return 40 + (total > 0 ? 50 * (p->installed < total ? p->installed : total) / total : 0);
    if (strcmp(p->phase, "download") == 0)
        return 5 + (total > 0 ? 35 * (p->fetched < total ? p->fetched : total) / total : 0);
    if (strcmp(p->phase, "update") == 0)
        return 2;
    return 0;
}

static bool settle(template_progress *p)
{
    int pc = percent_of(p);
    if (pc > p->percent)
        p->percent = pc;
    return true;
}

bool template_progress_phase(template_progress *p, const char *phase)
{
    if (strcmp(p->phase, phase) == 0)
        return false;
    p->phase = phase;
    return settle(p);
}

/* "[1234 kB]", "[1.2 MB]", "[512 B]" at the end of a Get: line: bytes, or 0. */
static long long bracket_bytes(const char *line, size_t len)
{
    if (len < 4 || line[len - 1] != ']')
        return 0;
    size_t open = len - 1;
    while (open > 0 && line[open] != '[')
        open--;
    char buf[32];
    size_t n = len - 1 - (open + 1);
    if (line[open] != '[' || n == 0 || n >= sizeof buf)
        return 0;
    memcpy(buf, line + open + 1, n);
    buf[n] = '\0';
    char *end = NULL;
    double v = strtod(buf, &end);
    if (!end || end == buf || v < 0 || v > 1e12)
        return 0;
    while (*end == ' ')
        end++;
    double unit = strcmp(end, "kB") == 0 ? 1e3 : strcmp(end, "MB") == 0 ? 1e6 : strcmp(end, "GB") == 0 ? 1e9 : 1;
    return (long long)(v * unit);
}

bool template_progress_line(template_progress *p, const char *line, size_t len)
{
    if (starts(line, len, "I: running apt-get update"))
        return template_progress_phase(p, "update");
    if (starts(line, len, "I: downloading packages"))
        return template_progress_phase(p, "download");
    if (starts(line, len, "I: installing essential") || starts(line, len, "I: extracting archives"))
        return template_progress_phase(p, "install");
    if (starts(line, len, "I: installing remaining")) {
        p->in_rest = true;
        return template_progress_phase(p, "install");
    }
    if (contains(line, len, " newly installed,")) {
        int n = atoi(contains(line, len, " upgraded, ") ? strstr(line, " upgraded, ") + 11 : line);
        if (n < 0 || n > 100000)
            return false;
        if (p->in_rest)
            p->total_rest = n;
        else
            p->total_essential = n;
        return settle(p);
    }
    if (starts(line, len, "Get:") && !contains(line, len, "Release") && !contains(line, len, "Packages") &&
        !contains(line, len, "Translation")) {
        p->fetched++;
        p->bytes += bracket_bytes(line, len);
        return settle(p);
    }
    if (starts(line, len, "Setting up ")) {
        p->installed++;
        return settle(p);
    }
    return false;
}

json_t *template_progress_json(const template_progress *p)
{
    return json_pack("{s:s,s:i,s:i,s:i,s:I,s:i}", "phase", p->phase, "packages_total",
                     p->total_essential + p->total_rest, "packages_fetched", p->fetched, "packages_installed",
                     p->installed, "bytes_fetched", (json_int_t)p->bytes, "percent", p->percent);
}
