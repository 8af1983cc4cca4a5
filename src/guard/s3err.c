/* s3err — S3's error answers; see s3err.h. */
#include "guard/s3err.h"

#include <jansson.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "guard/s3xml.h"
#include "net/errors.h"
#include "net/http.h"

/* S3's code and status for one of ours. */
static const char *code_for(ErrCode code, json_t *extra, unsigned *status)
{
    *status = error_status(code);
    switch (code) {
    case ERR_STALE_TOKEN:
        return "StaleFencingToken";
    case ERR_WRITE_CONFLICT:
        return "ConditionalRequestConflict";
    case ERR_BAD_REQUEST:
        return json_object_get(extra, "field") ? "InvalidArgument" : "InvalidRequest";
    case ERR_UNAUTHORIZED:
    case ERR_FORBIDDEN:
    case ERR_TOKEN_REQUIRED:
        *status = 403;
        return "AccessDenied";
    case ERR_NOT_FOUND:
        return "NoSuchKey";
    case ERR_METHOD_NOT_ALLOWED:
        return "MethodNotAllowed";
    case ERR_LENGTH_REQUIRED:
        return "MissingContentLength";
    case ERR_PAYLOAD_TOO_LARGE:
        *status = 400;
        return "EntityTooLarge";
    case ERR_KEY_LIMIT:
    case ERR_PEER_LIMIT:
    case ERR_OVERLOADED:
        *status = 503;
        return "SlowDown";
    case ERR_BAD_GATEWAY:
        return "BadGateway";
    case ERR_GATEWAY_TIMEOUT:
        return "GatewayTimeout";
    default:
        *status = 500;
        return "InternalError";
    }
}

static void element(S3Out *o, const char *name, const char *text)
{
    s3out_str(o, "<");
    s3out_str(o, name);
    s3out_str(o, ">");
    s3out_escaped(o, text);
    s3out_str(o, "</");
    s3out_str(o, name);
    s3out_str(o, ">");
}

static void number(S3Out *o, const char *name, json_t *v)
{
    if (!json_is_integer(v))
        return;
    char n[32];
    snprintf(n, sizeof n, "%lld", (long long)json_integer_value(v));
    element(o, name, n);
}

/* The request's path, without its query: the resource as the client named it. */
static void resource(S3Out *o, const Request *req)
{
    if (!req->raw_uri)
        return;
    s3out_str(o, "<Resource>");
    char path[1024];
    snprintf(path, sizeof path, "%.*s", (int)strcspn(req->raw_uri, "?"), req->raw_uri);
    s3out_escaped(o, path);
    s3out_str(o, "</Resource>");
}

static void reply_xml(Request *req, unsigned status, S3Out *o, const char *retry_after)
{
    size_t len = 0;
    char *text = s3out_take(o, &len);
    if (!text) {
        req->guard->reply_error = NULL; /* out of memory: the plain answer */
        http_reply_error(req, ERR_OVERLOADED, NULL, "out of memory; retry");
        return;
    }
    http_reply_text(req, status, "application/xml", text, len);
    if (retry_after)
        http_add_header(req, MHD_HTTP_HEADER_RETRY_AFTER, retry_after);
}

void s3err_reply(Request *req, int code_i, void *extra_v, const char *message)
{
    json_t *extra = extra_v;
    ErrCode code = (ErrCode)code_i;
    unsigned status;
    const char *s3code = code_for(code, extra, &status);
    json_t *over = json_object_get(extra, "s3_code");
    if (json_is_string(over))
        s3code = json_string_value(over);
    if (json_is_integer(json_object_get(extra, "s3_status")))
        status = (unsigned)json_integer_value(json_object_get(extra, "s3_status"));
    S3Out o = {0};
    s3out_str(&o, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error>");
    element(&o, "Code", s3code);
    element(&o, "Message", message);
    resource(&o, req);
    element(&o, "LeasegateError", error_code(code));
    json_t *field = json_object_get(extra, "field");
    if (json_is_string(field))
        element(&o, "ArgumentName", json_string_value(field));
    json_t *lock = json_object_get(extra, "lock");
    if (json_is_string(lock))
        element(&o, "Lock", json_string_value(lock));
    number(&o, "Token", json_object_get(extra, "token"));
    json_t *fence = json_object_get(extra, "fence");
    number(&o, "Fence", fence ? fence : json_object_get(extra, "max_token"));
    /* S3's own details of an error ([name, text] pairs: X-Amz-Expires, Expires, ServerTime). */
    size_t i;
    json_t *pair;
    json_array_foreach(json_object_get(extra, "s3_elements"), i, pair)
    {
        if (json_is_string(json_array_get(pair, 0)) && json_is_string(json_array_get(pair, 1)))
            element(&o, json_string_value(json_array_get(pair, 0)), json_string_value(json_array_get(pair, 1)));
    }
    s3out_str(&o, "</Error>");
    /* A share or a busy lock: SDKs back off and retry a 503 SlowDown. */
    char retry[24] = "";
    json_t *ms = json_object_get(extra, "retry_after_ms");
    if (status == 503)
        snprintf(retry, sizeof retry, "%lld",
                 json_is_integer(ms) ? (long long)(json_integer_value(ms) + 999) / 1000 : 1LL);
    json_decref(extra);
    reply_xml(req, status, &o, retry[0] ? retry : NULL);
}

/* S3's own words for the codes a store sends most. */
static const char *usual_message(const char *code)
{
    static const struct {
        const char *code, *message;
    } M[] = {{"NoSuchKey", "The specified key does not exist."},
             {"NoSuchUpload", "The specified multipart upload does not exist."},
             {"PreconditionFailed", "At least one of the preconditions you specified did not hold."},
             {"InvalidRange", "The requested range is not satisfiable."},
             {"AccessDenied", "Access Denied"},
             {"BadDigest", "The Content-MD5 or checksum you specified did not match what was received."},
             {"InvalidDigest", "The Content-MD5 or checksum you specified is not valid."},
             {"EntityTooSmall", "Your proposed upload is smaller than the minimum allowed object size."},
             {"InvalidPart", "One or more of the specified parts could not be found."},
             {"InvalidPartOrder", "The list of parts was not in ascending order."},
             {"NotModified", "Not Modified"}};
    for (size_t i = 0; i < sizeof M / sizeof M[0]; i++)
        if (!strcmp(M[i].code, code))
            return M[i].message;
    return "The store refused the request.";
}

/* Does text name the route's store (bucket, key prefix, endpoint)? */
static bool names_store(const GuardRoute *route, const char *text)
{
    return strstr(text, route->bucket) || (route->keyprefix[0] && strstr(text, route->keyprefix)) ||
           strstr(text, route->endpoint);
}

void s3err_from_store(Request *req, const GuardRoute *route, long status, const char *body, size_t len)
{
    S3Xml *x = len ? s3xml_parse(body, len) : NULL;
    const char *code = x && !strcmp(x->name, "Error") ? s3xml_text(x, "Code") : NULL;
    const char *message = x && !strcmp(x->name, "Error") ? s3xml_text(x, "Message") : NULL;
    if (!code || !*code || names_store(route, code))
        code = status == 404 ? "NoSuchKey" : status == 412 ? "PreconditionFailed" : status == 403 ? "AccessDenied"
               : status == 416                          ? "InvalidRange"
               : status == 304                          ? "NotModified"
               : status >= 500                          ? "InternalError"
                                                        : "InvalidRequest";
    if (!message || !*message || names_store(route, message))
        message = usual_message(code);
    S3Out o = {0};
    s3out_str(&o, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error>");
    element(&o, "Code", code);
    element(&o, "Message", message);
    resource(&o, req);
    s3out_str(&o, "</Error>");
    s3xml_free(x);
    /* Nothing may follow a 304 or a HEAD's answer: the head says it all. */
    if (status == 304) {
        o.len = 0;
    }
    reply_xml(req, (unsigned)status, &o, status == 503 ? "1" : NULL);
}
