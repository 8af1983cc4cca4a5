/* test_sigv4 — SigV4 as an S3 server checks it, against AWS's published examples
 * ("Signature Calculations for the Authorization Header" and "... Transferring Payload in
 * Multiple Chunks", both with the example key wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY). */
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
    char *q = sigv4_canonical_query("prefix=a%20b&list-type=2&delimiter=/&uploads");
    CHECK(q && !strcmp(q, "delimiter=%2F&list-type=2&prefix=a%20b&uploads="));
    free(q);
    q = sigv4_canonical_query("");
    CHECK(q && !strcmp(q, ""));
    free(q);
    q = sigv4_canonical_query("continuation-token=a%2Bb%3D&x-id=ListObjectsV2");
    CHECK(q && !strcmp(q, "continuation-token=a%2Bb%3D&x-id=ListObjectsV2"));
    free(q);
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
}

int main(void)
{
    get_object_example();
    chunked_example();
    canonical_query();
    malformed();
    return check_report("sigv4");
}
