/*
 * Unit tests of the proxies' header rule (httphead): the hop-by-hop set in any
 * case and only whole names, and the headers an answer's Connection headers
 * name, wherever those come among its lines and however their tokens are
 * spaced.
 */
#include <curl/curl.h>
#include <string.h>

#include "check.h"
#include "leasegate/httphead.h"

static bool hop(const struct curl_slist *lines, const char *name)
{
    return httphead_answer_hop(lines, name, strlen(name));
}

int main(void)
{
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
    return check_report("httphead");
}
