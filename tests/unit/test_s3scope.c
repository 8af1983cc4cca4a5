/* test_s3scope — what a key with some prefixes may ask the store in a listing
 * (src/guard/s3scope.h): never about a name it may not read. */
#include <string.h>

#include "check.h"
#include "guard/s3scope.h"

int main(void)
{
    char a[] = "team-a/", b[] = "team-b/sub/", c[] = "x";
    char *one[] = {a}, *two[] = {a, b}, *three[] = {a, b, c};
    size_t w = 99;
    /* Within a prefix: as asked. */
    CHECK(s3scope_plan(one, 1, "team-a/", "", &w) == S3SCOPE_ALL);
    CHECK(s3scope_plan(one, 1, "team-a/q", "/", &w) == S3SCOPE_ALL);
    CHECK(s3scope_plan(two, 2, "team-b/sub/deeper", "", &w) == S3SCOPE_ALL);
    /* Outside all of them: nothing. */
    CHECK(s3scope_plan(one, 1, "team-b/", "", &w) == S3SCOPE_NOTHING);
    CHECK(s3scope_plan(one, 1, "team-a", "", &w) == S3SCOPE_NARROW && w == 0); /* "team-a" lies above "team-a/" */
    CHECK(s3scope_plan(one, 1, "zz", "/", &w) == S3SCOPE_NOTHING);
    /* Above one prefix: asked with it instead, unless the delimiter cuts it. */
    CHECK(s3scope_plan(one, 1, "", "", &w) == S3SCOPE_NARROW && w == 0);
    CHECK(s3scope_plan(two, 2, "team-b", "", &w) == S3SCOPE_NARROW && w == 1);
    CHECK(s3scope_plan(one, 1, "te", "-", &w) == S3SCOPE_PREFIXES);
    CHECK(s3scope_plan(one, 1, "", "/", &w) == S3SCOPE_PREFIXES);
    CHECK(s3scope_plan(one, 1, "", "//", &w) == S3SCOPE_REFUSED); /* could begin inside the prefix and end after it */
    /* Above several: common prefixes only when the delimiter ends each of them. */
    CHECK(s3scope_plan(two, 2, "", "/", &w) == S3SCOPE_PREFIXES);
    CHECK(s3scope_plan(two, 2, "", "", &w) == S3SCOPE_REFUSED);
    CHECK(s3scope_plan(three, 3, "", "/", &w) == S3SCOPE_REFUSED); /* "x" holds no "/" */
    CHECK(s3scope_plan(three, 3, "team-", "/", &w) == S3SCOPE_PREFIXES);
    char out[64];
    CHECK(s3scope_common(b, "", "/", out, sizeof out) && !strcmp(out, "team-b/"));
    CHECK(s3scope_common(b, "team-b/", "/", out, sizeof out) && !strcmp(out, "team-b/sub/"));
    CHECK(s3scope_common(a, "te", "-", out, sizeof out) && !strcmp(out, "team-"));
    CHECK(!s3scope_common(a, "team-a/", "/", out, sizeof out));
    CHECK(!s3scope_common(a, "x", "/", out, sizeof out));
    CHECK(!s3scope_common(b, "", "/", out, 4));
    return check_report("s3scope");
}
