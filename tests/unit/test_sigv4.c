/* test_sigv4 — SigV4 as an S3 server checks it, against AWS's published examples
 * ("Signature Calculations for the Authorization Header", "... Transferring Payload in
 * Multiple Chunks" and "Authenticating Requests: Using Query Parameters", all with the
 * example key wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "guard/sigv4.h"

static const char SECRET[] = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";

static void get_object_example(void)
{
    SigV4Auth a;
    const char *why = NULL;
    CHECK(sigv4_parse("AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,"
                      "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,"
                      "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41",
                      &a, &why));
    CHECK(!strcmp(a.access_key, "AKIAIOSFODNN7EXAMPLE"));
    CHECK(!strcmp(a.scope, "20130524/us-east-1/s3/aws4_request"));
    CHECK(!strcmp(a.signed_headers, "host;range;x-amz-content-sha256;x-amz-date"));
    const char *canonical = "GET\n/test.txt\n\nhost:examplebucket.s3.amazonaws.com\nrange:bytes=0-9\n"
                            "x-amz-content-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n"
                            "x-amz-date:20130524T000000Z\n\nhost;range;x-amz-content-sha256;x-amz-date\n"
                            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
    char *sts = sigv4_string_to_sign("20130524T000000Z", &a, canonical);
    CHECK(sts != NULL);
    uint8_t key[32];
    sigv4_key(SECRET, &a, key);
    char sig[SIGV4_HEX];
    sigv4_hmac_hex(key, sts, strlen(sts), sig);
    CHECK(sigv4_equal(sig, a.signature));
    CHECK(!sigv4_equal(sig, "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb40"));
    free(sts);
}

static void chunked_example(void)
{
    SigV4Auth a;
    const char *why = NULL;
    CHECK(sigv4_parse("AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
                      "SignedHeaders=content-encoding;content-length;host;x-amz-content-sha256;x-amz-date;"
                      "x-amz-decoded-content-length;x-amz-storage-class, "
                      "Signature=4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9",
                      &a, &why));
    uint8_t key[32];
    sigv4_key(SECRET, &a, key);
    static char data[65536];
    memset(data, 'a', sizeof data);
    char hash[SIGV4_HEX], sig[SIGV4_HEX];
    sigv4_sha256_hex(data, sizeof data, hash);
    sigv4_chunk_sign(key, "20130524T000000Z", &a, a.signature, hash, sig);
    CHECK(!strcmp(sig, "ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648"));
    char prev[SIGV4_HEX];
    memcpy(prev, sig, sizeof prev);
    sigv4_sha256_hex(data, 1024, hash);
    sigv4_chunk_sign(key, "20130524T000000Z", &a, prev, hash, sig);
    CHECK(!strcmp(sig, "0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497"));
    memcpy(prev, sig, sizeof prev);
    sigv4_sha256_hex("", 0, hash);
    sigv4_chunk_sign(key, "20130524T000000Z", &a, prev, hash, sig);
    CHECK(!strcmp(sig, "b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9"));
}

static void canonical_query(void)
{
    char *q = sigv4_canonical_query("prefix=a%20b&list-type=2&delimiter=/&uploads", NULL);
    CHECK(q && !strcmp(q, "delimiter=%2F&list-type=2&prefix=a%20b&uploads="));
    free(q);
    q = sigv4_canonical_query("", NULL);
    CHECK(q && !strcmp(q, ""));
    free(q);
    q = sigv4_canonical_query("continuation-token=a%2Bb%3D&x-id=ListObjectsV2", NULL);
    CHECK(q && !strcmp(q, "continuation-token=a%2Bb%3D&x-id=ListObjectsV2"));
    free(q);
    /* Sorted by name, then by value (AWS; botocore sorts (name, value) pairs): a name sorts
     * before a longer one it begins, even where the longer one goes on with a byte below '='
     * ('-', '.', a digit, or an encoded byte's '%'). */
    /* A '+' is a space (S3 reads a query so), signed as %20; a plus is %2B. */
    q = sigv4_canonical_query("p=a+b&q=a%2Bb&r=a%20b&s+t=1", NULL);
    CHECK(q && !strcmp(q, "p=a%20b&q=a%2Bb&r=a%20b&s%20t=1"));
    free(q);
    q = sigv4_canonical_query("a-b=1&a.c=2&a0=3&a%00=4&a=5&a=0", NULL);
    CHECK(q && !strcmp(q, "a=0&a=5&a%00=4&a-b=1&a.c=2&a0=3"));
    free(q);
}

/* The guard's own store queries: a value encoded as S3 canonicalizes it, the bytes as they
 * are (a '%' or a '+' is itself, not an escape), is its own canonical form. */
static void encode(void)
{
    static const char *const IN[] = {"dir/sub/", "text/csv", "attachment; filename=\"a:b.csv\"", "a+b%2F~x_y-z.0", ""};
    static const char *const OUT[] = {"dir%2Fsub%2F", "text%2Fcsv", "attachment%3B%20filename%3D%22a%3Ab.csv%22",
                                      "a%2Bb%252F~x_y-z.0", ""};
    for (size_t i = 0; i < sizeof IN / sizeof IN[0]; i++) {
        char out[128], raw[160];
        CHECK(sigv4_encode(out, IN[i], strlen(IN[i])) == strlen(OUT[i]) && !strcmp(out, OUT[i]));
        snprintf(raw, sizeof raw, "v=%s", out);
        char *q = sigv4_canonical_query(raw, NULL);
        CHECK(q && !strcmp(q, raw));
        free(q);
    }
    char out[4];
    CHECK(sigv4_encode(out, "\xff", 1) == 3 && !strcmp(out, "%FF"));
}

/* AWS's presigned GET of examplebucket/test.txt: the query parsed, the canonical query made
 * without X-Amz-Signature (in any order, and with the '/' of the credential not encoded), the
 * canonical request's hash and the signature as AWS publishes them. */
static const char PRESIGNED[] =
    "X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404"
    "&X-Amz-SignedHeaders=host&X-Amz-Expires=86400&X-Amz-Date=20130524T000000Z"
    "&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request&X-Amz-Algorithm=AWS4-HMAC-SHA256";

static void presigned_example(void)
{
    CHECK(sigv4_query_signed(PRESIGNED));
    CHECK(!sigv4_query_signed("prefix=a&x-id=GetObject"));
    CHECK(sigv4_query_signed("X-Amz-Credential=x"));
    SigV4Query q;
    const char *why = NULL;
    CHECK(sigv4_parse_query(PRESIGNED, &q, &why));
    CHECK(!strcmp(q.auth.access_key, "AKIAIOSFODNN7EXAMPLE"));
    CHECK(!strcmp(q.auth.scope, "20130524/us-east-1/s3/aws4_request"));
    CHECK(!strcmp(q.auth.signed_headers, "host"));
    CHECK(!strcmp(q.amz_date, "20130524T000000Z"));
    CHECK(q.expires_s == 86400);
    char *query = sigv4_canonical_query(PRESIGNED, SIGV4_QUERY_SIGNATURE);
    CHECK(query && !strcmp(query, "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2F"
                                  "us-east-1%2Fs3%2Faws4_request&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&"
                                  "X-Amz-SignedHeaders=host"));
    char canonical[1024];
    snprintf(canonical, sizeof canonical, "GET\n/test.txt\n%s\nhost:examplebucket.s3.amazonaws.com\n\nhost\nUNSIGNED-PAYLOAD",
             query ? query : "");
    free(query);
    char hash[SIGV4_HEX];
    sigv4_sha256_hex(canonical, strlen(canonical), hash);
    CHECK(!strcmp(hash, "3bfa292879f6447bbcda7001decf97f4a54dc650c8942174ae0a9121cf58ad04"));
    char *sts = sigv4_string_to_sign(q.amz_date, &q.auth, canonical);
    CHECK(sts != NULL);
    uint8_t key[32];
    sigv4_key(SECRET, &q.auth, key);
    char sig[SIGV4_HEX];
    sigv4_hmac_hex(key, sts ? sts : "", sts ? strlen(sts) : 0, sig);
    CHECK(sigv4_equal(sig, q.auth.signature));
    free(sts);
    /* Another parameter (here one an SDK adds) is signed with the rest; only the signature is left out. */
    query = sigv4_canonical_query("x-id=GetObject&X-Amz-Signature=00&response-content-type=text%2Fplain", "X-Amz-Signature");
    CHECK(query && !strcmp(query, "response-content-type=text%2Fplain&x-id=GetObject"));
    free(query);
}

/* A presigned query that S3 refuses: each parameter missing, twice, or out of its range. */
static void presigned_malformed(void)
{
    static const char *const BAD[] = {
        /* no X-Amz-Expires */
        "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=7%2F20130524%2Fus-east-1%2Fs3%2Faws4_request"
        "&X-Amz-Date=20130524T000000Z&X-Amz-SignedHeaders=host"
        "&X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404",
        /* X-Amz-Expires above a week, and 0 */
        "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=7%2F20130524%2Fus-east-1%2Fs3%2Faws4_request"
        "&X-Amz-Date=20130524T000000Z&X-Amz-Expires=604801&X-Amz-SignedHeaders=host"
        "&X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404",
        "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=7%2F20130524%2Fus-east-1%2Fs3%2Faws4_request"
        "&X-Amz-Date=20130524T000000Z&X-Amz-Expires=0&X-Amz-SignedHeaders=host"
        "&X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404",
        /* X-Amz-Date twice */
        "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=7%2F20130524%2Fus-east-1%2Fs3%2Faws4_request"
        "&X-Amz-Date=20130524T000000Z&X-Amz-Date=20130524T000001Z&X-Amz-Expires=60&X-Amz-SignedHeaders=host"
        "&X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404",
        /* a date of another day than the credential's */
        "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=7%2F20130524%2Fus-east-1%2Fs3%2Faws4_request"
        "&X-Amz-Date=20130525T000000Z&X-Amz-Expires=60&X-Amz-SignedHeaders=host"
        "&X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404",
        /* host not signed */
        "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=7%2F20130524%2Fus-east-1%2Fs3%2Faws4_request"
        "&X-Amz-Date=20130524T000000Z&X-Amz-Expires=60&X-Amz-SignedHeaders=range"
        "&X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404",
        /* another algorithm, a short signature */
        "X-Amz-Algorithm=AWS4-HMAC-SHA1&X-Amz-Credential=7%2F20130524%2Fus-east-1%2Fs3%2Faws4_request"
        "&X-Amz-Date=20130524T000000Z&X-Amz-Expires=60&X-Amz-SignedHeaders=host"
        "&X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404",
        "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=7%2F20130524%2Fus-east-1%2Fs3%2Faws4_request"
        "&X-Amz-Date=20130524T000000Z&X-Amz-Expires=60&X-Amz-SignedHeaders=host&X-Amz-Signature=aeee",
        /* a credential without its service */
        "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=7%2F20130524%2Fus-east-1%2Faws4_request"
        "&X-Amz-Date=20130524T000000Z&X-Amz-Expires=60&X-Amz-SignedHeaders=host"
        "&X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404",
    };
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        SigV4Query q;
        const char *why = NULL;
        CHECK(!sigv4_parse_query(BAD[i], &q, &why) && why);
    }
    SigV4Query q;
    const char *why = NULL;
    CHECK(sigv4_parse_query("X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=7%2F20130524%2Fus-east-1%2Fs3%2F"
                            "aws4_request&X-Amz-Date=20130524T000000Z&X-Amz-Expires=604800&X-Amz-SignedHeaders="
                            "content-type%3Bhost&X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d"
                            "157751f604d404",
                            &q, &why));
    CHECK(q.expires_s == 604800 && !strcmp(q.auth.signed_headers, "content-type;host"));
    /* A credential with more than its five parts (S3: AuthorizationQueryParametersError). */
    CHECK(!sigv4_parse_query("X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=7%2F20130524%2Fus-east-1%2Fs3%2F"
                             "aws4_request%2Fmore&X-Amz-Date=20130524T000000Z&X-Amz-Expires=60&X-Amz-SignedHeaders="
                             "host&X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404",
                             &q, &why));
}

static void malformed(void)
{
    SigV4Auth a;
    const char *why = NULL;
    CHECK(!sigv4_parse("Bearer lgk_x", &a, &why) && why);
    CHECK(!sigv4_parse("AWS4-HMAC-SHA256 Credential=AKID/2013/us-east-1/s3/aws4_request, SignedHeaders=host, "
                       "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41",
                       &a, &why));
    CHECK(!sigv4_parse("AWS4-HMAC-SHA256 Credential=AKID/20130524/us-east-1/s3/aws4_request, SignedHeaders=host, "
                       "Signature=short",
                       &a, &why));
    CHECK(!sigv4_parse("AWS4-HMAC-SHA256 Credential=AKID/20130524/us-east-1/s3/other, SignedHeaders=host, "
                       "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41",
                       &a, &why));
    CHECK(!sigv4_parse("AWS4-HMAC-SHA256 Credential=AKID/20130524/us-east-1/s3/aws4_request/x/y, SignedHeaders=host, "
                       "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41",
                       &a, &why));
}

int main(void)
{
    get_object_example();
    chunked_example();
    canonical_query();
    encode();
    presigned_example();
    presigned_malformed();
    malformed();
    return check_report("sigv4");
}
