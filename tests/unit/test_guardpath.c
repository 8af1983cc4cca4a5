/*
 * Unit tests of what the guard takes from a request's head beyond its target
 * (guardpath.h, guardroute.h): a target's rest after a prefix that ends in '/'
 * (no leading '/' then); the Destination of a COPY or MOVE (an absolute
 * path under the prefix, or an absolute URI with the request's Host, by whole
 * segments, canonical, without query or fragment, within the buffer), and
 * when it is the source's own resource; whether a WebDAV If header names a
 * resource of its own; --guard specs (defaults, lock=, methods=, in either
 * order, and every refusal); and which routes may stand together
 * (guardroute_compatible: no route hidden behind an earlier one, no backend
 * object reached by two routes of different bindings).
 */
#include <stdbool.h>
#include <string.h>

#include "check.h"
#include "guard/guardpath.h"
#include "guard/guardroute.h"

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

/* A COPY or MOVE onto its own resource: the source's rest (with its query)
 * against the Destination's, as the backend decodes them. */
static void same_resources(void)
{
    CHECK(guardpath_same_resource("a/b.txt", "a/b.txt"));
    CHECK(guardpath_same_resource("a/b.txt?v=1", "a/b.txt"));
    CHECK(guardpath_same_resource("a/b.txt", "a/b.txt?x"));
    CHECK(guardpath_same_resource("", ""));
    CHECK(guardpath_same_resource("a*b", "a%2Ab"));
    CHECK(guardpath_same_resource("a%2ab", "a%2Ab"));
    CHECK(guardpath_same_resource("sp%20ace", "sp%20ace?q"));
    CHECK(!guardpath_same_resource("a/b.txt", "a/b.tx"));
    CHECK(!guardpath_same_resource("a/b.tx", "a/b.txt"));
    CHECK(!guardpath_same_resource("a/b.txt", "a/B.txt"));
    CHECK(!guardpath_same_resource("a/b.txt", "a/b.txt/"));
    CHECK(!guardpath_same_resource("a%2Ab", "a%2Bb"));
    CHECK(!guardpath_same_resource("a", ""));
    CHECK(!guardpath_same_resource("?a", "a"));
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

/* What the last compatible() call refused with. */
static char compat_err[1024];

/* Routes a (given first) and b, finished with region us-east-1 where they
 * are S3 routes: may they stand together? A refusal is one line that names
 * both prefixes, an acceptance leaves compat_err alone. */
static bool compatible(const char *a_spec, const char *b_spec)
{
    GuardRoute a, b;
    if (!parse(a_spec, &a) || !parse(b_spec, &b) ||
        !guardroute_finish_s3(&a, "us-east-1", compat_err, sizeof compat_err) ||
        !guardroute_finish_s3(&b, "us-east-1", compat_err, sizeof compat_err)) {
        CHECK(!"a spec of the test does not parse");
        return false;
    }
    strcpy(compat_err, "untouched");
    bool ok = guardroute_compatible(&a, &b, compat_err, sizeof compat_err);
    CHECK(ok ? !strcmp(compat_err, "untouched")
             : !strchr(compat_err, '\n') && strstr(compat_err, a.prefix) && strstr(compat_err, b.prefix));
    return ok;
}

static void route_sets(void)
{
    /* Apart upstream subtrees on one server, each with its own binding. */
    CHECK(compatible("/store/=http://127.0.0.1:9000/store/", "/fixed/=http://127.0.0.1:9000/fx/,lock=f"));
    CHECK(compatible("/a/=http://127.0.0.1:9000/a/", "/b/=http://127.0.0.1:9001/a/"));   /* another port */
    CHECK(compatible("/a/=http://127.0.0.1:9000/a/", "/b/=https://127.0.0.1:9000/a/")); /* another scheme */
    CHECK(compatible("/a/=http://up/a/", "/b/=http://other/a/"));
    /* One upstream path within the other (either way round, with or without
     * the trailing '/', at any depth) reaches the same objects. */
    CHECK(!compatible("/store/=http://127.0.0.1:9000/", "/nested/=http://127.0.0.1:9000/sub/"));
    CHECK(strstr(compat_err, "reach the same objects upstream") && strstr(compat_err, "http://127.0.0.1:9000/sub/"));
    CHECK(!compatible("/nested/=http://127.0.0.1:9000/sub/", "/store/=http://127.0.0.1:9000/"));
    CHECK(!compatible("/a/=http://up", "/b/=http://up/x/y/")); /* no path: the server's root */
    CHECK(!compatible("/a/=http://up/x/y/", "/b/=http://up"));
    CHECK(!compatible("/a/=http://up", "/b/=http://up/"));
    CHECK(!compatible("/a/=http://up/x", "/b/=http://up/x/"));
    CHECK(!compatible("/a/=http://up/x/", "/b/=http://up/x/y"));
    CHECK(!compatible("/a/=http://up/x/", "/b/=http://up/x/"));
    CHECK(!compatible("/a/=http://up/x", "/b/=http://up/x"));
    /* ... but by whole segments: /x is not within /xy. */
    CHECK(compatible("/a/=http://up/x", "/b/=http://up/xy/"));
    CHECK(compatible("/a/=http://up/x/", "/b/=http://up/x-y"));
    CHECK(compatible("/a/=http://up/xy/", "/b/=http://up/x"));
    /* Scheme and host name are compared without regard to case; the path is not. */
    CHECK(!compatible("/a/=http://UP.example:8080/x/", "/b/=http://up.EXAMPLE:8080/x/y/"));
    CHECK(compatible("/a/=http://up/X/", "/b/=http://up/x/"));
    /* Two routes bound to one lock=NAME may share objects: one lock protects
     * each of them whichever route a write takes. */
    CHECK(compatible("/a/=http://up/,lock=tree", "/b/=http://up/sub/,lock=tree"));
    CHECK(!compatible("/a/=http://up/,lock=tree", "/b/=http://up/sub/,lock=other"));
    CHECK(!compatible("/a/=http://up/,lock=tree", "/b/=http://up/sub/"));
    CHECK(!compatible("/a/=http://up/", "/b/=http://up/sub/,lock=tree"));
    CHECK(!compatible("/a/=http://up/", "/b/=http://up/")); /* two path bindings: sub/x is lock x and sub/x */
    /* S3: endpoint, bucket and key prefix; an HTTP route onto the same
     * endpoint's path-style bucket reaches the same objects. */
    CHECK(compatible("/a/=s3://bucket-one/reports", "/b/=s3://bucket-two/reports"));
    CHECK(compatible("/a/=s3://bucket-one/reports", "/b/=s3://bucket-one/reports-old"));
    CHECK(compatible("/a/=s3://bucket-one/a/b", "/b/=s3://bucket-one/a/bc"));
    CHECK(!compatible("/a/=s3://bucket-one", "/b/=s3://bucket-one/reports"));
    CHECK(!compatible("/a/=s3://bucket-one/reports/q3", "/b/=s3://bucket-one/reports"));
    CHECK(!compatible("/a/=s3://bucket-one/reports/", "/b/=s3://bucket-one/reports"));
    CHECK(compatible("/a/=s3://bucket-one/r,region=eu-west-1", "/b/=s3://bucket-one/r")); /* another endpoint */
    CHECK(!compatible("/a/=s3://bucket-one/r,endpoint=http://MinIO:9000/",
                      "/b/=s3://bucket-one/r/x,endpoint=http://minio:9000"));
    CHECK(!compatible("/a/=s3://bucket-one/r,endpoint=http://minio:9000", "/b/=http://minio:9000/bucket-one/"));
    CHECK(!compatible("/a/=http://minio:9000/", "/b/=s3://bucket-one,endpoint=http://minio:9000"));
    CHECK(compatible("/a/=http://minio:9000/other/", "/b/=s3://bucket-one,endpoint=http://minio:9000"));
    CHECK(compatible("/a/=s3://bucket-one/r,lock=t,endpoint=http://m:1",
                     "/b/=s3://bucket-one/r/x,lock=t,endpoint=http://m:1"));

    /* Order: the first route whose prefix matches takes a request, by whole
     * segments, so a later route under an earlier one's prefix is never reached. */
    CHECK(compatible("/store/vault/=http://up/vault/,lock=v", "/store/=http://up/store/"));
    CHECK(!compatible("/store/=http://up/store/", "/store/vault/=http://up/vault/,lock=v"));
    CHECK(strstr(compat_err, "--guard /store/vault/ is never reached") && strstr(compat_err, "longer prefix first"));
    CHECK(!compatible("/store=http://up/store/", "/store/vault/=http://up/vault/"));
    CHECK(!compatible("/store=http://up/store/", "/store/=http://up/vault/"));
    CHECK(!compatible("/store/=http://up/a/", "/store/=http://up/b/"));
    CHECK(!compatible("/store=http://up/a/", "/store=http://up/b/"));
    CHECK(compatible("/store=http://up/a/", "/storefront/=http://up/b/"));
    CHECK(compatible("/store=http://up/a/", "/storefront=http://up/b/"));
    CHECK(compatible("/store/=http://up/a/", "/store=http://up/b/")); /* "/store" and "/store?q" are the second's */
    CHECK(compatible("/a/b/=http://up/a/", "/a/=http://up/b/"));
    CHECK(compatible("/a/=http://up/a/", "/a-b/=http://up/b/"));
    /* Hidden behind an earlier route even with the same lock=NAME. */
    CHECK(!compatible("/t/=http://up/t/,lock=n", "/t/u/=http://up/t/u/,lock=n"));
}

/* The lock a path binds: ':' bare or as %3A is one lock (an upstream decodes
 * both to one object); any other escape names no lock. */
static void locks(void)
{
    char out[300];
    const char *problem = NULL;
    CHECK(guardpath_lock("/reports/a:b.csv?x=1", out, sizeof out, &problem) && !strcmp(out, "reports/a:b.csv"));
    CHECK(guardpath_lock("/reports/a%3Ab.csv", out, sizeof out, &problem) && !strcmp(out, "reports/a:b.csv"));
    CHECK(guardpath_lock("reports/a%3ab%3A", out, sizeof out, &problem) && !strcmp(out, "reports/a:b:"));
    CHECK(!guardpath_lock("/reports/a%2Ab", out, sizeof out, &problem) && problem);
    CHECK(!guardpath_lock("/reports/a%3", out, sizeof out, &problem) && problem);
    CHECK(!guardpath_lock("/reports/a%3?q=A", out, sizeof out, &problem) && problem);
    CHECK(!guardpath_lock("/", out, sizeof out, &problem) && problem);
    /* The 256-byte limit is the name's, %3A read as ':' (boto3 sends a
     * 254-byte key with two ':' as 258 bytes); out is never overrun. */
    char path[300], name[300];
    memcpy(path, "k%3A", 4);
    memset(path + 4, 'x', 250);
    memcpy(path + 254, "%3Az", 5);
    CHECK(strlen(path) == 258);
    CHECK(guardpath_lock(path, name, 257, &problem) && strlen(name) == 254 && !strncmp(name, "k:x", 3) &&
          !strcmp(name + 252, ":z"));
    memcpy(path + 254, "xxx%3Az", 8); /* 257 bytes decoded */
    CHECK(!guardpath_lock(path, name, sizeof name, &problem) && problem);
    CHECK(guardpath_lock("a%3Ab", out, 4, &problem) && !strcmp(out, "a:b"));
    CHECK(!guardpath_lock("a%3Ab", out, 3, &problem) && problem);
    CHECK(!guardpath_lock("a", out, 0, &problem) && problem);
    size_t len = 9;
    CHECK(guardpath_colons("/r/a%3ab:c?x", 10, out, sizeof out, &len) && len == 8 && !strcmp(out, "/r/a:b:c"));
}

int main(void)
{
    locks();
    destinations();
    rests();
    same_resources();
    if_headers();
    routes();
    route_sets();
    return check_report("guardpath");
}
