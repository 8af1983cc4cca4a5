/*
 * api_backup — GET /v1/backup (admin): a consistent copy of the database.
 *
 * The server holds its SQLite database exclusively (store_sqlite.c), so a
 * backup of a live server is asked of it, as etcd's snapshot is: the commit
 * writer copies the store with SQLite's backup API right after the batch
 * pending now is durable (so every change revealed before the request is in
 * the copy), into an unlinked file of its own beside the database, and the
 * answer streams that file. The server never writes to a path a request
 * names; `leasegate backup DEST` checks the copy and renames it locally.
 */
#include <microhttpd.h>
#include <unistd.h>

#include "api/api.h"
#include "leasegate/container.h"
#include "net/http.h"
#include "net/httphead.h"
#include "store/commit.h"

#define BACKUP_CONTENT_TYPE "application/vnd.sqlite3"

static void backup_ready(CommitHold *hold)
{
    Request *req = CONTAINER_OF(hold, Request, hold);
    uint64_t size;
    const char *err;
    int fd = commit_snapshot_take(req->srv->commit, &size, &err);
    if (fd < 0) {
        http_reply_error(req, ERR_INTERNAL, NULL, "the backup could not be made: %s", err);
        return;
    }
    /* Takes the descriptor: closed with the response. */
    struct MHD_Response *resp = MHD_create_response_from_fd64(size, fd);
    if (!resp)
        close(fd);
    else if (!httphead_add_answer_fields(resp, 200, BACKUP_CONTENT_TYPE)) {
        MHD_destroy_response(resp);
        resp = NULL;
    }
    /* What the copy holds is durable already: it waits for no later commit. */
    http_reply_passthrough(req, 200, resp);
}

void api_backup(Request *req)
{
    Commit *c = req->srv->commit;
    if (!commit_can_snapshot(c)) {
        http_reply_error(req, ERR_NOT_FOUND, NULL,
                         "backups are of the SQLite store; over etcd, back up etcd (etcdctl snapshot save)");
        return;
    }
    http_suspend_watched(req);
    req->hold.ready = backup_ready;
    commit_snapshot_hold(c, &req->hold);
}
