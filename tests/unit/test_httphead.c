/*
 * Unit tests of the proxies' header rule (httphead): the hop-by-hop set in any
 * case and only whole names, and the headers an answer's Connection headers
 * name, wherever those come among its lines and however their tokens are
 * spaced; what of an answer's lines reaches a libmicrohttpd response; and the
 * token rule of header names, byte by byte against RFC 9110's tchar set.
 */
#include <curl/curl.h>
#include <microhttpd.h>
#include <string.h>

#include "check.h"
#include "core/names.h"
#include "net/httphead.h"

static bool hop(const struct curl_slist *lines, const char *name)
{
    return httphead_answer_hop(lines, name, strlen(name));
}

int main(void)
{
    static const char TCHAR[] = "!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    for (int c = 0; c < 256; c++) {
        char one[2] = {(char)c, 'a'};
        bool want = c != 0 && memchr(TCHAR, c, sizeof TCHAR - 1) != NULL;
        CHECK(name_is_http_token(one, 1) == want);
        CHECK(name_is_http_token(one, 2) == want);
    }
    CHECK(!name_is_http_token("", 0));
    CHECK(name_is_http_token("Content-Type", 12));
    CHECK(!name_is_http_token("Content Type", 12));
    CHECK(!name_is_http_token("X-A\0B", 5)); /* a NUL inside the name's bytes */
    CHECK(httphead_hop_by_hop("transfer-ENCODING", 17));
    CHECK(httphead_hop_by_hop("Proxy-Authorization", 19));
    CHECK(httphead_hop_by_hop("TE: trailers", 2)); /* the name is len bytes, not up to a NUL */
    CHECK(!httphead_hop_by_hop("Connection", 9));
    CHECK(!httphead_hop_by_hop("Connections", 11));
    CHECK(!httphead_hop_by_hop("Content-Type", 12));

    char named[] = "X-Internal: 1", conn1[] = "Connection: keep-alive", conn2[] = "connection:x-a ,\tX-Internal , y";
    struct curl_slist l3 = {conn2, NULL}, l2 = {conn1, &l3}, l1 = {named, &l2};
    CHECK(hop(&l1, "X-Internal")); /* named by a later line */
    CHECK(hop(&l1, "x-a"));
    CHECK(hop(&l1, "Y"));
    CHECK(hop(&l1, "Upgrade"));
    CHECK(!hop(&l1, "X-Intern"));
    CHECK(!hop(&l1, "X-Internal-2"));
    CHECK(!hop(&l1, "Content-Type"));
    CHECK(!hop(&l2, "keep")); /* tokens are whole */
    CHECK(!hop(&l3, ""));
    /* Only a Connection header names headers. */
    char other[] = "Connection-Extra: X-Internal", proxy[] = "Proxy-Connection: X-Internal";
    struct curl_slist m2 = {proxy, NULL}, m1 = {other, &m2};
    CHECK(!hop(&m1, "X-Internal"));
    CHECK(!hop(NULL, "X-Internal"));

    /* What reaches the client of an answer: end-to-end fields as they came;
     * not the hop-by-hop ones, those a Connection header names, those the
     * proxy writes itself, malformed ones, or empty ones (libmicrohttpd
     * 0.9.75 cannot send them). */
    struct curl_slist *lines = NULL;
    const char *in[] = {"ETag: \"v1\"", "X-Empty:", "Keep-Alive: timeout=5", "X-Gone: 1", "Connection: x-gone",
                        "Date: Tue, 24 Nov 2026 04:00:00 GMT", "Bad Name: 1", "No-Colon", "X-Tab:\tv"};
    for (size_t i = 0; i < sizeof in / sizeof in[0]; i++)
        CHECK(httphead_keep_line(&lines, in[i], strlen(in[i]), HTTPHEAD_UPSTREAM_LIMITS) == HEAD_KEPT);
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    CHECK(resp != NULL);
    const char *own[] = {"Date", NULL};
    CHECK(httphead_pass_answer(lines, own, resp));
    const char *v = MHD_get_response_header(resp, "ETag");
    CHECK(v && !strcmp(v, "\"v1\""));
    CHECK(!MHD_get_response_header(resp, "X-Empty"));
    v = MHD_get_response_header(resp, "X-Tab");
    CHECK(v && !strcmp(v, "v"));
    CHECK(!MHD_get_response_header(resp, "Keep-Alive"));
    CHECK(!MHD_get_response_header(resp, "X-Gone"));
    CHECK(!MHD_get_response_header(resp, "Connection"));
    CHECK(!MHD_get_response_header(resp, "Date"));
    CHECK(!MHD_get_response_header(resp, "Bad Name"));
    MHD_destroy_response(resp);
    curl_slist_free_all(lines);

    /* An obs-folded field (RFC 9112 5.2) is kept as one line, each fold a
     * space: its value passes whole, and a Connection header whose fold names
     * a header still names it. */
    lines = NULL;
    const char *folded[] = {"X-Internal: secret", "Connection: close,", " X-Internal", "X-Fold: one", "\t two"};
    for (size_t i = 0; i < sizeof folded / sizeof folded[0]; i++)
        CHECK(httphead_keep_line(&lines, folded[i], strlen(folded[i]), HTTPHEAD_UPSTREAM_LIMITS) == HEAD_KEPT);
    CHECK(hop(lines, "X-Internal"));
    resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    CHECK(resp && httphead_pass_answer(lines, NULL, resp));
    CHECK(!MHD_get_response_header(resp, "X-Internal"));
    v = MHD_get_response_header(resp, "X-Fold");
    CHECK(v && !strcmp(v, "one two"));
    MHD_destroy_response(resp);
    curl_slist_free_all(lines);

    /* An answer keeps at most HTTPHEAD_UPSTREAM_FIELDS fields; a fold of
     * the last one is still joined to it. */
    lines = NULL;
    char field[32];
    for (int i = 0; i < HTTPHEAD_UPSTREAM_FIELDS; i++) {
        int n = snprintf(field, sizeof field, "X-F%d: v", i);
        CHECK(httphead_keep_line(&lines, field, (size_t)n, HTTPHEAD_UPSTREAM_LIMITS) == HEAD_KEPT);
    }
    CHECK(httphead_keep_line(&lines, " more", 5, HTTPHEAD_UPSTREAM_LIMITS) == HEAD_KEPT);
    CHECK(httphead_keep_line(&lines, "X-Too: many", 11, HTTPHEAD_UPSTREAM_LIMITS) == HEAD_TOO_BIG);
    size_t kept = 0;
    for (const struct curl_slist *l = lines; l; l = l->next)
        kept++;
    CHECK(kept == HTTPHEAD_UPSTREAM_FIELDS);
    curl_slist_free_all(lines);

    /* ... and at most HTTPHEAD_UPSTREAM_BYTES, folds included. */
    lines = NULL;
    HeadLimits small = {10, 20};
    CHECK(httphead_keep_line(&lines, "A: 0123456789", 13, small) == HEAD_KEPT);    /* 13 */
    CHECK(httphead_keep_line(&lines, " 12345", 6, small) == HEAD_KEPT);           /* joined: 13 + 1 + 5 = 19 */
    CHECK(httphead_keep_line(&lines, " 2", 2, small) == HEAD_TOO_BIG);            /* 21 */
    CHECK(httphead_keep_line(&lines, "B: 1", 4, small) == HEAD_TOO_BIG);          /* 23 */
    CHECK(httphead_keep_line(&lines, "B", 1, small) == HEAD_KEPT);                /* 20 */
    CHECK(lines && lines->next && !lines->next->next && !strcmp(lines->data, "A: 0123456789 12345"));
    /* What libmicrohttpd writes of them at most: "A: 0123456789 12345\r\n",
     * "B: \r\n", and its status line and own fields. */
    CHECK(httphead_answer_head_size(lines) == httphead_answer_head_size(NULL) + 19 + 3 + 1 + 3);
    curl_slist_free_all(lines);
    return check_report("httphead");
}
