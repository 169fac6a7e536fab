/* curl_loop: the reference for the SDK's small-call rate. N sequential GETs of one URL on one
 * libcurl easy handle (so one keep-alive connection), with the headers the SDK sends, each
 * body read and dropped; prints "<calls> <seconds> <connections opened>" on stdout. Exit 1 on any
 * failure (a transfer error or a status other than 200).
 *
 *   curl_loop URL N [HEADER...]        e.g. curl_loop http://127.0.0.1:8080/healthz 2000 "X-API-Key: k"
 */
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static size_t discard(char *data, size_t size, size_t nmemb, void *user)
{
    (void)data;
    (void)user;
    return size * nmemb;
}

static double now_seconds(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) return 0.0;
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s URL N [HEADER...]\n", argv[0]);
        return 2;
    }
    char *end = NULL;
    long n = strtol(argv[2], &end, 10);
    if (end == argv[2] || *end != '\0' || n < 1 || n > 10000000) {
        fprintf(stderr, "curl_loop: N must be a number from 1 to 10000000\n");
        return 2;
    }
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) return 1;
    CURL *easy = curl_easy_init();
    struct curl_slist *headers = NULL;
    int rc = 1;
    if (!easy) goto out;
    for (int i = 3; i < argc; i++) {
        struct curl_slist *more = curl_slist_append(headers, argv[i]);
        if (!more) goto out;
        headers = more;
    }
    if (curl_easy_setopt(easy, CURLOPT_URL, argv[1]) != CURLE_OK ||
        curl_easy_setopt(easy, CURLOPT_HTTPHEADER, headers) != CURLE_OK ||
        curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, discard) != CURLE_OK ||
        curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, 10000L) != CURLE_OK)
        goto out;
    long connects = 0;
    double start = now_seconds();
    for (long i = 0; i < n; i++) {
        long status = 0, fresh = 0;
        CURLcode code = curl_easy_perform(easy);
        if (code != CURLE_OK) {
            fprintf(stderr, "curl_loop: call %ld: %s\n", i + 1, curl_easy_strerror(code));
            goto out;
        }
        if (curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status) != CURLE_OK || status != 200) {
            fprintf(stderr, "curl_loop: call %ld: status %ld\n", i + 1, status);
            goto out;
        }
        if (curl_easy_getinfo(easy, CURLINFO_NUM_CONNECTS, &fresh) == CURLE_OK) connects += fresh;
    }
    double seconds = now_seconds() - start;
    printf("%ld %.6f %ld\n", n, seconds, connects);
    rc = 0;
out:
    curl_slist_free_all(headers);
    if (easy) curl_easy_cleanup(easy);
    curl_global_cleanup();
    return rc;
}
