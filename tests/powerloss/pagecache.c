/* pagecache — unsynced writes per file, in memory; see pagecache.h. */
#include "pagecache.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PAGE 4096
#define SECTOR 512
#define BUCKETS 256
#define NO_CUT INT64_MAX /* `keep` when no truncation waits for a sync */

struct CachedFile {
    ino_t ino;
    int fd;            /* the backing file, owned */
    off_t size;        /* what a reader sees */
    off_t durable;     /* the backing file's size */
    off_t keep;        /* backing bytes from here on read as zeros (NO_CUT: none) */
    unsigned char **pages; /* page index -> dirty page (owned) or NULL */
    size_t npages;     /* slots in pages */
    size_t ndirty;
    int handles;
    bool nameless;     /* its last name was removed */
    CachedFile *next;  /* in its bucket */
};

struct PageCache {
    CachedFile *buckets[BUCKETS];
};

PageCache *pagecache_new(void) { return calloc(1, sizeof(PageCache)); }

static void drop_pages(CachedFile *f)
{
    for (size_t i = 0; i < f->npages; i++)
        free(f->pages[i]);
    free(f->pages);
    f->pages = NULL;
    f->npages = 0;
    f->ndirty = 0;
}

static void file_free(CachedFile *f)
{
    drop_pages(f);
    close(f->fd);
    free(f);
}

void pagecache_free(PageCache *pc)
{
    if (!pc)
        return;
    for (int b = 0; b < BUCKETS; b++)
        while (pc->buckets[b]) {
            CachedFile *f = pc->buckets[b];
            pc->buckets[b] = f->next;
            file_free(f);
        }
    free(pc);
}

static CachedFile **slot_of(PageCache *pc, ino_t ino)
{
    CachedFile **p = &pc->buckets[ino % BUCKETS];
    while (*p && (*p)->ino != ino)
        p = &(*p)->next;
    return p;
}

CachedFile *pagecache_find(PageCache *pc, ino_t ino) { return *slot_of(pc, ino); }

static bool clean(const CachedFile *f) { return f->ndirty == 0 && f->keep == NO_CUT && f->size == f->durable; }

static void unlink_free(PageCache *pc, CachedFile *f)
{
    CachedFile **p = slot_of(pc, f->ino);
    *p = f->next;
    file_free(f);
}

int pagecache_adopt(PageCache *pc, int fd, CachedFile **out)
{
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    CachedFile **p = slot_of(pc, st.st_ino);
    if (*p) {
        close(fd);
        (*p)->handles++;
        *out = *p;
        return 0;
    }
    CachedFile *f = calloc(1, sizeof *f);
    if (!f) {
        close(fd);
        return -ENOMEM;
    }
    f->ino = st.st_ino;
    f->fd = fd;
    f->size = f->durable = st.st_size;
    f->keep = NO_CUT;
    f->handles = 1;
    *p = f;
    *out = f;
    return 0;
}

int pagecache_open(PageCache *pc, int dirfd, const char *rel, CachedFile **out)
{
    int fd = openat(dirfd, rel, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0 && (errno == EACCES || errno == EROFS || errno == EISDIR))
        fd = openat(dirfd, rel, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return -errno;
    return pagecache_adopt(pc, fd, out);
}

void pagecache_close(PageCache *pc, CachedFile *f)
{
    if (--f->handles == 0 && (f->nameless || clean(f)))
        unlink_free(pc, f);
}

void pagecache_gone(PageCache *pc, ino_t ino)
{
    CachedFile *f = pagecache_find(pc, ino);
    if (!f)
        return;
    f->nameless = true;
    if (f->handles == 0)
        unlink_free(pc, f);
}

int pagecache_sync_all(PageCache *pc)
{
    int first = 0;
    for (int b = 0; b < BUCKETS; b++)
        for (CachedFile *f = pc->buckets[b]; f; f = f->next) {
            int rc = f->nameless ? 0 : cachedfile_sync(f);
            if (rc && !first)
                first = rc;
        }
    return first;
}

void pagecache_dirty(const PageCache *pc, size_t *files, size_t *pages)
{
    *files = *pages = 0;
    for (int b = 0; b < BUCKETS; b++)
        for (const CachedFile *f = pc->buckets[b]; f; f = f->next)
            if (!clean(f) && !f->nameless) {
                (*files)++;
                *pages += f->ndirty;
            }
}

int cachedfile_fd(const CachedFile *f) { return f->fd; }
off_t cachedfile_size(const CachedFile *f) { return f->size; }

/* n bytes at off as the backing file holds them: zeros past its end or past `keep`. */
static int read_durable(const CachedFile *f, char *buf, size_t n, off_t off)
{
    off_t end = f->keep < f->durable ? f->keep : f->durable;
    size_t have = off >= end ? 0 : (size_t)(end - off) < n ? (size_t)(end - off) : n;
    size_t done = 0;
    while (done < have) {
        ssize_t r = pread(f->fd, buf + done, have - done, off + (off_t)done);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -errno;
        if (r == 0)
            break; /* shorter than fstat said: the rest reads as zeros */
        done += (size_t)r;
    }
    memset(buf + done, 0, n - done);
    return 0;
}

ssize_t cachedfile_read(CachedFile *f, char *buf, size_t n, off_t off)
{
    if (off < 0)
        return -EINVAL;
    if (off >= f->size)
        return 0;
    if ((off_t)n > f->size - off)
        n = (size_t)(f->size - off);
    size_t done = 0;
    while (done < n) {
        off_t pos = off + (off_t)done;
        size_t pg = (size_t)(pos / PAGE), in = (size_t)(pos % PAGE);
        size_t len = PAGE - in < n - done ? PAGE - in : n - done;
        if (pg < f->npages && f->pages[pg]) {
            memcpy(buf + done, f->pages[pg] + in, len);
        } else {
            int rc = read_durable(f, buf + done, len, pos);
            if (rc)
                return rc;
        }
        done += len;
    }
    return (ssize_t)n;
}

/* The dirty page pg, made from what a reader sees there now: NULL when out of memory. */
static unsigned char *dirty_page(CachedFile *f, size_t pg, int *err)
{
    if (pg >= f->npages) {
        size_t n = f->npages ? f->npages : 16;
        while (n <= pg)
            n *= 2;
        unsigned char **p = realloc(f->pages, n * sizeof *p);
        if (!p) {
            *err = -ENOMEM;
            return NULL;
        }
        memset(p + f->npages, 0, (n - f->npages) * sizeof *p);
        f->pages = p;
        f->npages = n;
    }
    if (f->pages[pg])
        return f->pages[pg];
    unsigned char *page = malloc(PAGE);
    if (!page) {
        *err = -ENOMEM;
        return NULL;
    }
    off_t start = (off_t)pg * PAGE;
    /* Past `size` a page is zeros (the invariant), whatever the backing file still holds. */
    size_t seen = start >= f->size ? 0 : f->size - start < PAGE ? (size_t)(f->size - start) : PAGE;
    int rc = read_durable(f, (char *)page, seen, start);
    if (rc) {
        free(page);
        *err = rc;
        return NULL;
    }
    memset(page + seen, 0, PAGE - seen);
    f->pages[pg] = page;
    f->ndirty++;
    return page;
}

ssize_t cachedfile_write(CachedFile *f, const char *buf, size_t n, off_t off)
{
    if (off < 0 || n > (size_t)(INT64_MAX - off))
        return -EINVAL;
    size_t done = 0;
    while (done < n) {
        off_t pos = off + (off_t)done;
        size_t pg = (size_t)(pos / PAGE), in = (size_t)(pos % PAGE);
        size_t len = PAGE - in < n - done ? PAGE - in : n - done;
        int err = 0;
        unsigned char *page = dirty_page(f, pg, &err);
        if (!page)
            return err;
        memcpy(page + in, buf + done, len);
        done += len;
        if (pos + (off_t)len > f->size)
            f->size = pos + (off_t)len;
    }
    return (ssize_t)n;
}

int cachedfile_truncate(CachedFile *f, off_t size)
{
    if (size < 0)
        return -EINVAL;
    if (size < f->size) {
        size_t first_gone = (size_t)((size + PAGE - 1) / PAGE);
        for (size_t pg = first_gone; pg < f->npages; pg++)
            if (f->pages[pg]) {
                free(f->pages[pg]);
                f->pages[pg] = NULL;
                f->ndirty--;
            }
        size_t pg = (size_t)(size / PAGE), in = (size_t)(size % PAGE);
        if (in && pg < f->npages && f->pages[pg])
            memset(f->pages[pg] + in, 0, PAGE - in);
        if (size < f->keep)
            f->keep = size;
    }
    f->size = size;
    return 0;
}

static int write_all(int fd, const unsigned char *buf, size_t n, off_t off)
{
    size_t done = 0;
    while (done < n) {
        ssize_t w = pwrite(fd, buf + done, n - done, off + (off_t)done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -errno;
        done += (size_t)w;
    }
    return 0;
}

int cachedfile_sync(CachedFile *f)
{
    if (f->keep < f->durable) {
        if (ftruncate(f->fd, f->keep) != 0)
            return -errno;
        f->durable = f->keep;
    }
    for (size_t pg = 0; pg < f->npages; pg++) {
        if (!f->pages[pg])
            continue;
        off_t start = (off_t)pg * PAGE;
        size_t len = f->size - start < PAGE ? (size_t)(f->size - start) : PAGE;
        int rc = write_all(f->fd, f->pages[pg], len, start);
        if (rc)
            return rc;
        free(f->pages[pg]);
        f->pages[pg] = NULL;
        f->ndirty--;
        if (start + (off_t)len > f->durable)
            f->durable = start + (off_t)len;
    }
    if (f->durable != f->size && ftruncate(f->fd, f->size) != 0)
        return -errno;
    f->durable = f->size;
    f->keep = NO_CUT;
    return 0;
}

/* xorshift64*: a reproducible draw per seed, nothing more. */
static uint64_t draw(uint64_t *state)
{
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    return *state * 0x2545F4914F6CDD1DULL;
}

long pagecache_spill(PageCache *pc, unsigned long long seed)
{
    uint64_t state = seed ? seed : 1;
    long written = 0;
    for (int b = 0; b < BUCKETS; b++)
        for (CachedFile *f = pc->buckets[b]; f; f = f->next) {
            if (f->nameless)
                continue;
            if (f->keep < f->durable && (draw(&state) & 1)) {
                if (ftruncate(f->fd, f->keep) != 0)
                    return -errno;
                f->durable = f->keep;
            }
            for (size_t pg = 0; pg < f->npages; pg++) {
                if (!f->pages[pg])
                    continue;
                off_t start = (off_t)pg * PAGE;
                size_t len = f->size - start < PAGE ? (size_t)(f->size - start) : PAGE;
                for (size_t at = 0; at < len; at += SECTOR) {
                    if (!(draw(&state) & 1))
                        continue;
                    size_t n = len - at < SECTOR ? len - at : SECTOR;
                    int rc = write_all(f->fd, f->pages[pg] + at, n, start + (off_t)at);
                    if (rc)
                        return rc;
                    written++;
                }
            }
        }
    return written;
}
