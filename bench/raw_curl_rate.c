/* raw_curl_rate: the baseline for the SDK's small-call rate. N sequential GETs of one URL with
 * an X-API-Key header on one libcurl easy handle (so one kept-alive connection), as fast as
 * they go; every answer must be HTTP 200. Prints one line:
 *
 *   calls=<n> seconds=<s> rate=<calls per second> cpu_us=<this process's CPU time per call,
 *   microseconds> connects=<new connections>
 *
 * Usage: raw_curl_rate URL API_KEY N          (exit 0; 1 on a failed call; 2 on bad usage)
 * Built by `make bench` as build/bench/raw_curl_rate. */
#define _POSIX_C_SOURCE 200809L   /* clock_gettime */

#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static size_t discard(char *ptr, size_t size, size_t nmemb, void *ud)
{
  (void)ptr;
  (void)ud;
  return size * nmemb;
}

static double now_seconds(void)
{
  struct timespec ts;
  if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) return 0;
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int usage(const char *why)
{
  fprintf(stderr, "raw_curl_rate: %s\nusage: raw_curl_rate URL API_KEY N   (N: 1..10000000 calls)\n", why);
  return 2;
}

int main(int argc, char **argv)
{
  char header[1024], *end = NULL;
  long n, i, connects = 0;
  struct curl_slist *headers = NULL;
  CURL *easy;
  double t0, elapsed, cpu;
  clock_t c0;
  int rc = 0;

  if (argc != 4) return usage("three arguments expected");
  errno = 0;
  n = strtol(argv[3], &end, 10);
  if (errno != 0 || end == argv[3] || *end != '\0' || n < 1 || n > 10000000) return usage("bad N");
  if (strncmp(argv[1], "http://", 7) != 0 && strncmp(argv[1], "https://", 8) != 0)
    return usage("URL must start with http:// or https://");
  if (strpbrk(argv[2], "\r\n") != NULL) return usage("API_KEY must be one line");
  if (snprintf(header, sizeof header, "X-API-Key: %s", argv[2]) >= (int)sizeof header)
    return usage("API_KEY too long");

  if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
    fprintf(stderr, "raw_curl_rate: curl_global_init failed\n");
    return 1;
  }
  easy = curl_easy_init();
  headers = curl_slist_append(NULL, header);
  if (easy == NULL || headers == NULL) {
    fprintf(stderr, "raw_curl_rate: out of memory\n");
    curl_slist_free_all(headers);
    if (easy) curl_easy_cleanup(easy);
    curl_global_cleanup();
    return 1;
  }
  curl_easy_setopt(easy, CURLOPT_URL, argv[1]);
  curl_easy_setopt(easy, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, discard);
  curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, 30000L);

  t0 = now_seconds();
  c0 = clock();
  for (i = 0; i < n; i++) {
    long status = 0, new_connects = 0;
    CURLcode code = curl_easy_perform(easy);
    if (code != CURLE_OK) {
      fprintf(stderr, "raw_curl_rate: call %ld failed: %s\n", i + 1, curl_easy_strerror(code));
      rc = 1;
      break;
    }
    curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_getinfo(easy, CURLINFO_NUM_CONNECTS, &new_connects);
    connects += new_connects;
    if (status != 200) {
      fprintf(stderr, "raw_curl_rate: call %ld answered HTTP %ld\n", i + 1, status);
      rc = 1;
      break;
    }
  }
  elapsed = now_seconds() - t0;
  cpu = (double)(clock() - c0) / CLOCKS_PER_SEC;
  if (rc == 0)
    printf("calls=%ld seconds=%.6f rate=%.1f cpu_us=%.1f connects=%ld\n", n, elapsed,
           elapsed > 0 ? (double)n / elapsed : 0.0, cpu / (double)n * 1e6, connects);

  curl_slist_free_all(headers);
  curl_easy_cleanup(easy);
  curl_global_cleanup();
  return rc;
}
