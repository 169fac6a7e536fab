/* Unit test of airlockd's logger (log/log.h): the level names, the levels a line needs, and
 * the lines it writes to stderr, text and JSON: time and level first, the node, tenant and
 * session when given, one line per call (a caller's own newline dropped), quotes, controls
 * and bytes that are not UTF-8 escaped in JSON, each line of log_lines its own. Built and run
 * by spec/server/log_units_spec.lua under ASan/UBSan. */
#include "check.h"
#include "log/log.h"

#include <regex.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* What the logger wrote to stderr while fn ran, NUL-terminated, in out. */
static void capture(void (*fn)(void), char *out, size_t cap)
{
    int p[2];
    if (pipe(p) != 0) {
        out[0] = '\0';
        return;
    }
    int saved = dup(STDERR_FILENO);
    dup2(p[1], STDERR_FILENO);
    close(p[1]);
    fn();
    dup2(saved, STDERR_FILENO);
    close(saved);
    ssize_t n = read(p[0], out, cap - 1);
    close(p[0]);
    out[n > 0 ? n : 0] = '\0';
}

static bool matches(const char *text, const char *pattern)
{
    regex_t re;
    if (regcomp(&re, pattern, REG_EXTENDED | REG_NOSUB) != 0)
        return false;
    bool ok = regexec(&re, text, 0, NULL, 0) == 0;
    regfree(&re);
    return ok;
}

static void text_lines(void)
{
    log_setup(LV_INFO, false, NULL);
    log_info("listening on %s\n", "http://127.0.0.1:1");
    log_debug("never written: %d", 1);
    log_session(LV_WARN, "sbx_0123456789ab", "acme", "refused");
}

static void node_json_lines(void)
{
    log_setup(LV_DEBUG, true, "node-1");
    log_session(LV_ERROR, "sbx_0123456789ab", "acme", "a \"quote\", a tab\there, \xff and \xc3\xa9, cut \xe2\x82");
    log_debug("plain");
}

static void many_lines(void)
{
    log_setup(LV_WARN, false, NULL);
    log_lines(LV_WARN, "first\n\nsecond\n");
    log_lines(LV_INFO, "not at warn");
}

int main(void)
{
    log_level lv;
    CHECK(log_level_parse("debug", &lv) == 0 && lv == LV_DEBUG);
    CHECK(log_level_parse("error", &lv) == 0 && lv == LV_ERROR);
    CHECK(log_level_parse("verbose", &lv) == -1);

    char out[8192];
    capture(text_lines, out, sizeof out);
    CHECK(matches(out, "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}Z info  airlockd: "
                       "listening on http://127\\.0\\.0\\.1:1\n"
                       "[0-9T:.Z-]+ warn  airlockd tenant=acme session=sbx_0123456789ab: refused\n$"));

    capture(node_json_lines, out, sizeof out);
    CHECK(matches(out, "^\\{\"time\":\"[0-9T:.Z-]+\",\"level\":\"error\",\"node\":\"node-1\","
                       "\"session\":\"sbx_0123456789ab\",\"tenant\":\"acme\",\"msg\":\"a \\\\\"quote\\\\\", "
                       "a tab\\\\u0009here, \\\\ufffd and \xc3\xa9, cut \\\\ufffd\\\\ufffd\"\\}\n"
                       "\\{\"time\":\"[0-9T:.Z-]+\",\"level\":\"debug\",\"node\":\"node-1\",\"msg\":\"plain\"\\}\n$"));

    capture(many_lines, out, sizeof out);
    CHECK(matches(out, "^[0-9T:.Z-]+ warn  airlockd: first\n[0-9T:.Z-]+ warn  airlockd: second\n$"));
    if (failures)
        printf("last output:\n%s", out);
    return CHECK_SUMMARY();
}
