/*
 * cli_observe — `leasegate leader NAME --watch`: the observers' stream of an
 * election (GET /v1/elections/NAME/observe, Server-Sent Events) as one JSON
 * line per event. The stream is read with libcurl; a message is the lines up
 * to a blank one (`id:`, `event:`, `data:`; comments and `retry:` skipped).
 * The last `id:` seen is sent as Last-Event-ID when the stream is opened
 * again, on the same server or the next, so that no event is printed twice
 * or missed.
 */
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "store/jsondump.h"

#define LINE_MAX_BYTES (1024 * 1024) /* a message's line (an event's data) at most; a value is far less */
#define ERROR_BODY_MAX (64 * 1024)
#define ID_MAX 32
/* The server sends a comment every 15 s: a stream silent for this long is dead. */
#define SILENCE_S 45L
#define GIVE_UP_MS 60000 /* no server reachable this long: exit 1 */
#define BACKOFF_FIRST_MS 100
#define BACKOFF_MAX_MS 2000

typedef struct Stream {
    CURL *e;
    char *line;     /* the line being read (malloc'd) */
    size_t len, cap;
    char event[64];
    char *data;     /* the message's data lines joined with '\n' (malloc'd), NULL: none yet */
    char id[ID_MAX];       /* the message's id: */
    char last_id[ID_MAX];  /* the last message's that was printed or skipped: the resume point */
    bool restart;   /* too_old: the events after last_id are gone; start from the current state */
    bool refused;   /* unauthorized: the key no longer reaches this election */
    bool failed;    /* out of memory, a line too long, or stdout failed */
    char *body;     /* a non-200 answer's body (malloc'd) */
    size_t body_len;
} Stream;

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Prints {"event": event, <data's fields>} on one line. */
static bool print_event(const char *event, const char *data)
{
    json_t *fields = json_loads(data, 0, NULL), *line = json_object();
    bool ok = json_is_object(fields) && line && json_object_set_new(line, "event", json_string(event)) == 0 &&
              json_object_update(line, fields) == 0;
    char *text = ok ? jsondump_whole(line, JSON_COMPACT) : NULL;
    ok = text && printf("%s\n", text) >= 0 && fflush(stdout) == 0;
    if (!ok)
        fprintf(stderr, "leasegate leader: cannot print the event '%s' (%s)\n", event,
                json_is_object(fields) ? "out of memory, or stdout failed" : "its data is not a JSON object");
    free(text);
    json_decref(fields);
    json_decref(line);
    return ok;
}

/* A blank line: the message read so far is complete. */
static void dispatch(Stream *st)
{
    if (!strcmp(st->event, "leader") || !strcmp(st->event, "vacant")) {
        if (!print_event(st->event, st->data ? st->data : "{}"))
            st->failed = true;
    } else if (!strcmp(st->event, "too_old")) {
        st->restart = true;
    } else if (!strcmp(st->event, "unauthorized")) {
        st->refused = true;
        fprintf(stderr, "leasegate leader: the stream was ended: %s\n", st->data ? st->data : "unauthorized");
    }
    if (st->id[0] && !st->failed)
        memcpy(st->last_id, st->id, sizeof st->id);
    st->event[0] = st->id[0] = '\0';
    free(st->data);
    st->data = NULL;
}

static void field(Stream *st, char *line)
{
    if (!*line) {
        if (st->data || st->event[0])
            dispatch(st);
        return;
    }
    if (*line == ':')
        return; /* a comment: the keep-alive */
    char *colon = strchr(line, ':'), *value = colon ? colon + 1 : line + strlen(line);
    if (colon)
        *colon = '\0';
    if (*value == ' ')
        value++;
    if (!strcmp(line, "event")) {
        snprintf(st->event, sizeof st->event, "%s", value);
    } else if (!strcmp(line, "id")) {
        snprintf(st->id, sizeof st->id, "%s", value);
    } else if (!strcmp(line, "data")) {
        size_t old = st->data ? strlen(st->data) : 0, add = strlen(value);
        char *d = realloc(st->data, old + add + 2);
        if (!d) {
            st->failed = true;
            return;
        }
        if (old)
            d[old++] = '\n';
        memcpy(d + old, value, add + 1);
        st->data = d;
    }
}

static size_t on_data(char *p, size_t size, size_t n, void *ud)
{
    Stream *st = ud;
    size_t add = size * n;
    long status = 0;
    curl_easy_getinfo(st->e, CURLINFO_RESPONSE_CODE, &status);
    if (status != 200) {
        if (st->body_len + add > ERROR_BODY_MAX)
            return 0;
        char *b = realloc(st->body, st->body_len + add + 1);
        if (!b)
            return 0;
        memcpy(b + st->body_len, p, add);
        st->body = b;
        st->body_len += add;
        b[st->body_len] = '\0';
        return add;
    }
    for (size_t i = 0; i < add && !st->failed && !st->refused && !st->restart; i++) {
        if (p[i] == '\n') {
            if (st->len && st->line[st->len - 1] == '\r')
                st->len--;
            st->line[st->len] = '\0';
            st->len = 0;
            field(st, st->line);
            continue;
        }
        if (st->len + 2 > st->cap) {
            size_t cap = st->cap ? st->cap * 2 : 256;
            char *l = cap <= LINE_MAX_BYTES ? realloc(st->line, cap) : NULL;
            if (!l) {
                fprintf(stderr, "leasegate leader: a line of the stream is too long, or out of memory\n");
                st->failed = true;
                break;
            }
            st->line = l;
            st->cap = cap;
        }
        st->line[st->len++] = p[i];
    }
    return st->failed || st->refused || st->restart ? 0 : add;
}

/* One stream from the server whose base URL is the first slen bytes of
 * server. 0 with *status once it answered (and, for 200, the stream ended),
 * -1 when it could not be reached (err). */
static int stream_one(Stream *st, const char *server, size_t slen, const char *path, long *status, char *err,
                      size_t errlen)
{
    while (slen && server[slen - 1] == '/')
        slen--;
    char *url = NULL, keybuf[CLI_KEY_MAX], *auth = NULL, *resume = NULL;
    const char *key = cli_key(keybuf);
    struct curl_slist *headers = NULL, *h = NULL;
    st->e = curl_easy_init();
    bool ok = st->e && asprintf(&url, "%.*s%s", (int)slen, server, path) >= 0 &&
              (h = curl_slist_append(headers, "Accept: text/event-stream")) != NULL;
    headers = ok ? h : NULL;
    if (ok && key && *key) {
        ok = asprintf(&auth, "Authorization: Bearer %s", key) >= 0 && (h = curl_slist_append(headers, auth)) != NULL;
        headers = ok ? h : headers;
    }
    if (ok && st->last_id[0]) {
        ok = asprintf(&resume, "Last-Event-ID: %s", st->last_id) >= 0 && (h = curl_slist_append(headers, resume)) != NULL;
        headers = ok ? h : headers;
    }
    int rc = -1;
    char curl_err[CURL_ERROR_SIZE] = "";
    if (!ok) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    if (cli_cacert())
        curl_easy_setopt(st->e, CURLOPT_CAINFO, cli_cacert());
    curl_easy_setopt(st->e, CURLOPT_ERRORBUFFER, curl_err);
    curl_easy_setopt(st->e, CURLOPT_URL, url);
    curl_easy_setopt(st->e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(st->e, CURLOPT_CONNECTTIMEOUT_MS, cli_first_byte_ms());
    curl_easy_setopt(st->e, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(st->e, CURLOPT_LOW_SPEED_TIME, SILENCE_S);
    curl_easy_setopt(st->e, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(st->e, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(st->e, CURLOPT_WRITEDATA, st);
    CURLcode cc = curl_easy_perform(st->e);
    curl_easy_getinfo(st->e, CURLINFO_RESPONSE_CODE, status);
    if (*status) {
        rc = 0; /* it answered; a stream that ended, however (closed, silent, cut), is opened again */
    } else {
        snprintf(err, errlen, "%s: %s", url, curl_err[0] ? curl_err : curl_easy_strerror(cc));
    }
out:
    free(url);
    free(auth);
    free(resume);
    curl_slist_free_all(headers);
    curl_easy_cleanup(st->e);
    st->e = NULL;
    return rc;
}

static void sleep_ms(int64_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* A refusal's exit code, after printing it as the other commands do. */
static int refused(Stream *st, long status)
{
    json_t *reply = st->body ? json_loads(st->body, 0, NULL) : NULL;
    const char *e = json_string_value(json_object_get(reply, "error"));
    const char *msg = json_string_value(json_object_get(reply, "message"));
    fprintf(stderr, "leasegate leader: %s (HTTP %ld): %s%s\n", e ? e : "error", status, msg ? msg : "unexpected answer",
            status == 401 ? cli_key_hint() : "");
    json_decref(reply);
    return CLI_FAILED;
}

int cli_observe(const char *servers, const char *name)
{
    char path[512], err[512] = "";
    snprintf(path, sizeof path, "/v1/elections/%s/observe", name);
    Stream st = {0};
    int64_t failing_since = -1, backoff = BACKOFF_FIRST_MS;
    const char *server = servers;
    int code = -1;
    while (code < 0) {
        size_t len = strcspn(server, ",");
        long status = 0;
        free(st.body);
        st.body = NULL;
        st.body_len = st.len = 0;
        int rc = stream_one(&st, server, len, path, &status, err, sizeof err);
        free(st.data);
        st.data = NULL;
        st.event[0] = st.id[0] = '\0';
        if (st.failed || st.refused) {
            code = CLI_FAILED;
        } else if (rc == 0 && status == 200) {
            failing_since = -1;
            backoff = BACKOFF_FIRST_MS;
            sleep_ms(BACKOFF_FIRST_MS); /* a server that ends streams at once is not asked in a tight loop */
        } else if (rc == 0 && status == 410) {
            st.restart = true;
        } else if (rc == 0 && status != 503) {
            code = refused(&st, status);
        } else {
            int64_t now = now_ms();
            if (failing_since < 0)
                failing_since = now;
            if (now - failing_since >= GIVE_UP_MS) {
                fprintf(stderr, "leasegate leader: no server answered for %ds: %s\n", GIVE_UP_MS / 1000,
                        rc ? err : "503 (not serving)");
                code = CLI_FAILED;
            }
            server = server[len] == ',' ? server + len + 1 : servers;
            if (server == servers) {
                sleep_ms(backoff);
                backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
            }
        }
        if (st.restart && code < 0) {
            fprintf(stderr, "leasegate leader: the events after %s are no longer kept; going on from the "
                            "election's current state\n",
                    st.last_id[0] ? st.last_id : "the start");
            st.last_id[0] = '\0';
            st.restart = false;
        }
    }
    free(st.line);
    free(st.body);
    return code;
}
