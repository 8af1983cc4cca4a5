/*
 * Unit tests of what the guard takes from a request's head beyond its target
 * (guardpath.h, guardroute.h): a target's rest after a prefix that ends in '/'
 * (no leading '/' then); the Destination of a COPY or MOVE (an absolute
 * path under the prefix, or an absolute URI with the request's Host, by whole
 * segments, canonical, without query or fragment, within the buffer); whether
 * a WebDAV If header names a resource of its own; and --guard specs
 * (defaults, lock=, methods=, in either order, and every refusal).
 */
#include <stdbool.h>
#include <string.h>

#include "check.h"
#include "leasegate/guardpath.h"
#include "leasegate/guardroute.h"

static char rest[64];

/* The rest a Destination gives, or NULL; a refusal always says why, an
 * acceptance never does. */
static const char *dest(const char *value, const char *host, const char *prefix)
{
    const char *problem = NULL;
    memset(rest, 'x', sizeof rest);
    const char *r = guardpath_destination(value, host, prefix, rest, sizeof rest, &problem);
    CHECK(r == NULL ? problem != NULL && *problem : r == rest);
    return r;
}

static bool dest_is(const char *value, const char *host, const char *prefix, const char *want)
{
    const char *r = dest(value, host, prefix);
    return r && !strcmp(r, want);
}

static void destinations(void)
{
    const char *h = "gw.example:8080";
    /* Absolute paths under the prefix, with or without its trailing '/'. */
    CHECK(dest_is("/store/a/b.txt", h, "/store/", "a/b.txt"));
    CHECK(dest_is("/store/a/b.txt", NULL, "/store/", "a/b.txt")); /* a path needs no Host */
    CHECK(dest_is("/store/a", h, "/store", "/a"));
    CHECK(dest_is("/store", h, "/store", ""));
    CHECK(dest_is("/store/", h, "/store/", ""));
    CHECK(dest_is("/store/dir/", h, "/store/", "dir/")); /* a collection: guard.c judges it */
    CHECK(dest_is("/store/a%20b", h, "/store/", "a%20b"));
    /* Prefixes match whole segments. */
    CHECK(!dest("/storefront/a", h, "/store"));
    CHECK(!dest("/store", h, "/store/"));
    CHECK(!dest("/stor", h, "/store"));
    CHECK(!dest("/st%6fre/a", h, "/store/"));
    CHECK(!dest("/STORE/a", h, "/store/"));
    CHECK(!dest("/other/a", h, "/store/"));
    CHECK(!dest("/a", h, "/store/"));
    /* Absolute URIs: http or https, the authority exactly the request's Host in any case. */
    CHECK(dest_is("http://gw.example:8080/store/a", h, "/store/", "a"));
    CHECK(dest_is("https://gw.example:8080/store/a", h, "/store/", "a"));
    CHECK(dest_is("HTTP://GW.Example:8080/store/a", h, "/store/", "a"));
    CHECK(dest_is("http://gw.example:8080/store/a", "GW.EXAMPLE:8080", "/store/", "a"));
    CHECK(dest_is("http://gw.example:8080/store", h, "/store", ""));
    CHECK(!dest("http://gw.example:8081/store/a", h, "/store/"));
    CHECK(!dest("http://gw.example:80800/store/a", h, "/store/"));
    CHECK(!dest("http://gw.example:808/store/a", h, "/store/"));
    CHECK(!dest("http://gw.example/store/a", h, "/store/"));
    CHECK(!dest("http://other:8080/store/a", h, "/store/"));
    CHECK(!dest("http://u@gw.example:8080/store/a", h, "/store/"));
    CHECK(!dest("http://gw.example:8080@evil/store/a", h, "/store/"));
    CHECK(!dest("http://gw.example:8080/store/a", NULL, "/store/")); /* no Host: no absolute URI */
    CHECK(!dest("http://gw.example:8080/store/a", "", "/store/"));
    CHECK(!dest("http:///store/a", "", "/store/"));
    CHECK(!dest("http:///store/a", h, "/store/"));
    CHECK(!dest("ftp://gw.example:8080/store/a", h, "/store/"));
    CHECK(!dest("http:/store/a", h, "/store/"));
    CHECK(!dest("http:gw.example:8080/store/a", h, "/store/"));
    CHECK(!dest("//gw.example:8080/store/a", h, "/store/")); /* a network-path reference */
    CHECK(!dest("store/a", h, "/store/"));
    CHECK(!dest("", h, "/store/"));
    CHECK(!dest("*", h, "/store/"));
    /* An absolute URI needs a path. */
    CHECK(!dest("http://gw.example:8080", h, "/store/"));
    CHECK(!dest("http://gw.example:8080?x=/store/a", h, "/store/"));
    CHECK(!dest("http://gw.example:8080#/store/a", h, "/store/"));
    /* No query, no fragment, even empty ones. */
    CHECK(!dest("/store/a?x=1", h, "/store/"));
    CHECK(!dest("/store/a?", h, "/store/"));
    CHECK(!dest("/store/a#f", h, "/store/"));
    CHECK(!dest("/store/a#", h, "/store/"));
    CHECK(!dest("http://gw.example:8080/store/a?x", h, "/store/"));
    /* Canonical by the rules of request targets. */
    static const char *const NOT_CANONICAL[] = {
        "/store/a/../b", "/store/..",     "/store/a/..",  "/store/a/%2e%2e/b", "/store/a/%2E%2e/b",
        "/store/./a",    "/store/a/.",    "/store///a",   "/store/a//b",       "/store/a%2fb",
        "/store/a%2Fb",  "/store/a%5cb",  "/store/a\\b",  "/store/a;p",        "/store/a%3bp",
        "/store/a%00",   "/store/a%0d%0a", "/store/%41",  "/store/a%2",        "/store/a%zz",
        "/store/a b",    "/store/a\"b",   "/store/a<b>",  "/store/a\x01",      "/store/\xc3\xa9",
        "/store/%25",    "/store/a%7f",   "/store/a/%2e",
    };
    for (size_t i = 0; i < sizeof NOT_CANONICAL / sizeof NOT_CANONICAL[0]; i++) {
        bool ok = dest(NOT_CANONICAL[i], h, "/store/") != NULL;
        CHECK(!ok);
        if (ok)
            fprintf(stderr, "  accepted: '%s'\n", NOT_CANONICAL[i]);
    }
    CHECK(!dest("http://gw.example:8080/store/a/../b", h, "/store/"));
    /* The rest keeps a leading '/' only where the prefix has none: "/store//a"
     * is an empty segment, and under "/store/" the rest "/a" would reach what
     * a route "/store/a/" protects. */
    CHECK(!dest("/store//a", h, "/store/"));
    CHECK(!dest("/store//", h, "/store/"));
    CHECK(!dest("http://gw.example:8080/store//a", h, "/store/"));
    CHECK(dest_is("/store/a", h, "/store", "/a"));
    /* The rest must fit the buffer with its NUL. */
    char fits[sizeof rest + 8];
    memcpy(fits, "/store/", 7);
    memset(fits + 7, 'a', sizeof rest);
    fits[7 + sizeof rest] = '\0';
    CHECK(dest(fits, h, "/store/") == NULL); /* as long as the buffer: no room for the NUL */
    fits[7 + sizeof rest - 1] = '\0';
    CHECK(dest(fits, h, "/store/") != NULL && strlen(rest) == sizeof rest - 1);
    char small[4];
    const char *problem = NULL;
    CHECK(!guardpath_destination("/store/abcd", NULL, "/store/", small, sizeof small, &problem) && problem);
    CHECK(guardpath_destination("/store/abc", NULL, "/store/", small, sizeof small, &problem) == small &&
          !strcmp(small, "abc"));
}

static void rests(void)
{
    CHECK(guardpath_rest_problem("/store/", "a/b") == NULL);
    CHECK(guardpath_rest_problem("/store/", "") == NULL);
    CHECK(guardpath_rest_problem("/store/", "?q") == NULL);
    CHECK(guardpath_rest_problem("/store/", "dir/") == NULL);
    CHECK(guardpath_rest_problem("/store/", "/a") != NULL);
    CHECK(guardpath_rest_problem("/store/", "/") != NULL);
    CHECK(guardpath_rest_problem("/store/", "//a") != NULL);
    CHECK(guardpath_rest_problem("/store/", "a/../b") != NULL);
    CHECK(guardpath_rest_problem("/store", "/a") == NULL);
    CHECK(guardpath_rest_problem("/store", "/") == NULL);
    CHECK(guardpath_rest_problem("/store", "") == NULL);
    CHECK(guardpath_rest_problem("/store", "?q") == NULL);
    CHECK(guardpath_rest_problem("/store", "//a") != NULL);
    CHECK(guardpath_rest_problem("/store", "/a//b") != NULL);
}

static void if_headers(void)
{
    /* Untagged lists: conditions on the request's own target. */
    static const char *const UNTAGGED[] = {
        "(<urn:uuid:181d4fae-7d8c-11d0-a765-00a0c91e6bf2>)",
        "(<urn:uuid:1>) (<urn:uuid:2>)",
        "(Not <urn:uuid:1>)",
        "(Not <urn:uuid:1> [\"etag\"]) (<urn:uuid:2>)",
        "([\"etag\"])",
        "([W/\"weak\"])",
        "(<urn:a>[\"e\"])",
        "  (<urn:a>)\t",
        "(<urn:)>)",   /* a ')' inside a state token closes nothing */
        "([\"a)b\"])", /* nor one inside an entity tag */
        "(<urn:(>)",
    };
    for (size_t i = 0; i < sizeof UNTAGGED / sizeof UNTAGGED[0]; i++)
        CHECK(!guardpath_if_names_resource(UNTAGGED[i]));
    /* Tagged lists, and whatever does not parse. */
    static const char *const NAMES[] = {
        "<http://x/other> (<urn:uuid:1>)",
        "<http://x/other>(<urn:uuid:1>)",
        "(<urn:uuid:1>) <http://x/other> (<urn:uuid:2>)",
        "</store/other> ([\"e\"])",
        "((<urn:uuid:1>))", /* nested */
        "(<urn:uuid:1>",    /* unbalanced */
        "(<urn:uuid:1>))",
        "(",
        ")",
        ")(",
        "junk",
        "Not (<urn:uuid:1>)",
        "(<urn:uuid:1>) junk",
        "(<urn:uuid:1>),(<urn:uuid:2>)",
        "[\"etag\"]", /* an entity tag outside a list */
        "(<unterminated",
        "([\"unterminated)",
        "(<urn:a>) <",
    };
    for (size_t i = 0; i < sizeof NAMES / sizeof NAMES[0]; i++)
        CHECK(guardpath_if_names_resource(NAMES[i]));
}

/* Parses spec; on failure err holds one line. */
static bool parse(const char *spec, GuardRoute *r)
{
    char err[512];
    err[0] = '\0';
    bool ok = guardroute_parse(spec, r, err, sizeof err);
    CHECK(ok || (err[0] && !strchr(err, '\n')));
    return ok;
}

static void routes(void)
{
    GuardRoute r;
    CHECK(parse("/store/=http://127.0.0.1:9000/", &r));
    CHECK(!strcmp(r.prefix, "/store/") && !strcmp(r.upstream, "http://127.0.0.1:9000/") && r.lock[0] == '\0');
    CHECK(r.nmethods == 7 && !strcmp(r.allow, "GET, HEAD, OPTIONS, PUT, POST, PATCH, DELETE"));
    CHECK(guardroute_allows(&r, "PUT") && guardroute_allows(&r, "PATCH") && guardroute_allows(&r, "GET"));
    CHECK(!guardroute_allows(&r, "COPY") && !guardroute_allows(&r, "MOVE") && !guardroute_allows(&r, "PROPFIND"));
    CHECK(!guardroute_allows(&r, "put") && !guardroute_allows(&r, "") && !guardroute_allows(&r, "GETX"));
    CHECK(guardroute_is_read("GET") && guardroute_is_read("HEAD") && guardroute_is_read("OPTIONS"));
    CHECK(!guardroute_is_read("get") && !guardroute_is_read("PROPFIND") && !guardroute_is_read("PUT") &&
          !guardroute_is_read("GETS"));

    CHECK(parse("/s=https://up.example/base,lock=orders/42", &r));
    CHECK(!strcmp(r.prefix, "/s") && !strcmp(r.upstream, "https://up.example/base") && !strcmp(r.lock, "orders/42"));
    CHECK(r.nmethods == 7);
    CHECK(parse("/s/=http://up/,methods=GET+PUT+COPY", &r));
    CHECK(r.lock[0] == '\0' && r.nmethods == 3 && !strcmp(r.allow, "GET, PUT, COPY"));
    CHECK(guardroute_allows(&r, "COPY") && !guardroute_allows(&r, "DELETE") && !guardroute_allows(&r, "HEAD"));
    /* Both options, in either order, give the same route. */
    GuardRoute a, b;
    CHECK(parse("/s/=http://up/,lock=tree/,methods=GET+MOVE", &a));
    CHECK(parse("/s/=http://up/,methods=GET+MOVE,lock=tree/", &b));
    CHECK(!strcmp(a.upstream, "http://up/") && !strcmp(b.upstream, "http://up/"));
    CHECK(!strcmp(a.lock, "tree/") && !strcmp(b.lock, "tree/"));
    CHECK(a.nmethods == 2 && b.nmethods == 2 && !strcmp(a.allow, "GET, MOVE") && !strcmp(b.allow, a.allow));
    /* A comma that starts no known option is the upstream's. */
    CHECK(parse("/s/=http://up/a,b,lock=n", &r));
    CHECK(!strcmp(r.upstream, "http://up/a,b") && !strcmp(r.lock, "n"));
    /* Sixteen methods of up to 15 bytes fit. */
    CHECK(parse("/s/=http://up/,methods=M0+M1+M2+M3+M4+M5+M6+M7+M8+M9+M10+M11+M12+M13+M14+VERSION-CONTROL", &r));
    CHECK(r.nmethods == 16 && guardroute_allows(&r, "VERSION-CONTROL"));
    char longest[300] = "/";
    memset(longest + 1, 'p', 254);
    strcpy(longest + 255, "=http://up/");
    CHECK(parse(longest, &r) && strlen(r.prefix) == 255);

    static const char *const BAD[] = {
        "",
        "nonsense",
        "/x/=",
        "=http://127.0.0.1:1/",
        "x/=http://127.0.0.1:1/",
        "/x/=ftp://127.0.0.1:1/",
        "/x/=http://",
        "/x/=https://",
        "/x/=notaurl",
        "/x/=http://up/,lock=",
        "/x/=http://up/,lock=a b",
        "/x/=http://up/,lock=a%20b",
        "/x/=http://up/,lock=x/acquire",
        "/x/=http://up/,lock=a,lock=b",
        "/x/=http://up/,lock=a,,methods=GET",
        "/x/=http://up/,lock=a,unknown=1",
        "/x/=http://up/,methods=",
        "/x/=http://up/,methods=put",
        "/x/=http://up/,methods=Get",
        "/x/=http://up/,methods=GET+GET",
        "/x/=http://up/,methods=GET+TRACE",
        "/x/=http://up/,methods=CONNECT",
        "/x/=http://up/,methods=GET++PUT",
        "/x/=http://up/,methods=GET+",
        "/x/=http://up/,methods=+GET",
        "/x/=http://up/,methods=GE T",
        "/x/=http://up/,methods=GET,PUT",
        "/x/=http://up/,methods=GET(",
        "/x/=http://up/,methods=SEVENTEEN-LETTER", /* 16 bytes */
        "/x/=http://up/,methods=M0+M1+M2+M3+M4+M5+M6+M7+M8+M9+M10+M11+M12+M13+M14+M15+M16",
        "/x/=http://up/,methods=GET,methods=PUT",
        "/x/=http://up/,lock=a,methods=GET,lock=b",
    };
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        bool ok = parse(BAD[i], &r);
        CHECK(!ok);
        if (ok)
            fprintf(stderr, "  accepted: '%s'\n", BAD[i]);
    }
    char lock257[320];
    strcpy(lock257, "/x/=http://up/,lock=");
    size_t n = strlen(lock257);
    memset(lock257 + n, 'n', 257);
    lock257[n + 257] = '\0';
    CHECK(!parse(lock257, &r));
    longest[255] = 'p';
    strcpy(longest + 256, "=http://up/");
    CHECK(!parse(longest, &r)); /* a 256-byte prefix */
}

int main(void)
{
    destinations();
    rests();
    if_headers();
    routes();
    return check_report("guardpath");
}
