/* Unit tests of awscred: AWS shared credentials files and the environment. */
#include <string.h>

#include "check.h"
#include "guard/awscred.h"

static void test_profiles(void)
{
    AwsCreds c;
    char err[256];
    const char *text = "# a comment\n"
                       "[default]\n"
                       "aws_access_key_id = AKIADEFAULT\n"
                       "aws_secret_access_key=secretdefault\r\n"
                       "\n"
                       "[ci]\n"
                       "  aws_access_key_id =AKIACI  \n"
                       "aws_secret_access_key = secretci\n"
                       "aws_session_token = tok/en+=\n"
                       "region = eu-west-1\n";
    CHECK(awscred_parse(text, "default", &c, err, sizeof err));
    CHECK(!strcmp(c.access_key, "AKIADEFAULT") && !strcmp(c.secret_key, "secretdefault") && !c.session_token[0]);
    CHECK(awscred_parse(text, "ci", &c, err, sizeof err));
    CHECK(!strcmp(c.access_key, "AKIACI") && !strcmp(c.secret_key, "secretci") && !strcmp(c.session_token, "tok/en+="));
    CHECK(!awscred_parse(text, "nope", &c, err, sizeof err) && strstr(err, "no [nope] section"));
    CHECK(!awscred_parse("[default]\naws_access_key_id = A\n", "default", &c, err, sizeof err));
    CHECK(strstr(err, "lacks"));
    CHECK(!awscred_parse("[default\naws_access_key_id = A\n", "default", &c, err, sizeof err));
    CHECK(!awscred_parse("[default]\njunk\n", "default", &c, err, sizeof err) && strstr(err, "line 2"));
    /* A value with a space or a control byte would end up in a header line. */
    CHECK(!awscred_parse("[default]\naws_access_key_id = A B\naws_secret_access_key = s\n", "default", &c, err,
                         sizeof err));
    CHECK(!strstr(err, "A B")); /* never the value itself */
    CHECK(!awscred_parse("[default]\naws_access_key_id = A\x01\naws_secret_access_key = s\n", "default", &c, err,
                         sizeof err));
}

static void test_env(void)
{
    AwsCreds c;
    char err[256];
    CHECK(awscred_from_env("AK", "SK", NULL, &c, err, sizeof err) && !c.session_token[0]);
    CHECK(awscred_from_env("AK", "SK", "TOK", &c, err, sizeof err) && !strcmp(c.session_token, "TOK"));
    CHECK(!awscred_from_env(NULL, "SK", NULL, &c, err, sizeof err));
    CHECK(!awscred_from_env("AK", "", NULL, &c, err, sizeof err));
    char big[300];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    CHECK(!awscred_from_env(big, "SK", NULL, &c, err, sizeof err) && strstr(err, "longer"));
}

int main(void)
{
    test_profiles();
    test_env();
    return check_report("awscred");
}
