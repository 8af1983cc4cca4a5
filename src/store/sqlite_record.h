/*
 * sqlite_record — each record kind (record.h) in SQLite, described once: its
 * table, its columns by name, how a record binds to them and how a row reads
 * back. store_sqlite.c builds every statement from these descriptors (the
 * put, the removal, the load, and the backup check's count and token
 * counter), so a column's place is never written by hand: the binders and
 * readers use indexes generated from the column lists, and the statements
 * list the columns in that same order.
 *
 * A put is an upsert on the key (the columns marked SQL_KEY, which come
 * first): every other column is set (SQL_SET) or only ever raised (SQL_MAX:
 * marks and floors, so that storage keeps the largest whatever the order of
 * two batches' records). A removal deletes the row with the record's key.
 *
 * The tables themselves (their CREATE TABLE, and the migration steps between
 * versions) are store_sqlite.c's; a statement naming a column the schema
 * lacks fails when the store opens.
 */
#ifndef LEASEGATE_SQLITE_RECORD_H
#define LEASEGATE_SQLITE_RECORD_H

#include <sqlite3.h>
#include <stdbool.h>

#include "store/record.h"

typedef enum SqlMerge { SQL_KEY, SQL_SET, SQL_MAX } SqlMerge;

typedef struct SqlColumn {
    const char *name;
    uint8_t merge; /* SqlMerge */
} SqlColumn;

typedef struct SqlKind {
    const char *table;
    const SqlColumn *columns; /* the key's first */
    int ncolumns;
    int nkey;           /* how many of the first columns are the key */
    const char *where;  /* the kind's rows of a shared table ("token = 0"), or NULL */
    const char *order;  /* the load's order ("token"), or NULL */
    int counter;        /* the column whose largest value vouches for the token counter, or -1 */
    bool names;         /* its rows are names of the lock space (counted by the backup check) */
    /* Binds r to the put's parameters (?1 is the first column's) or, for a
     * removal, to the key's. SQLITE_OK, or an error. boot: the boot the
     * store runs in (a lease's deadline is on its clock). */
    int (*bind)(sqlite3_stmt *st, const StoreRecord *r, sqlite3_int64 boot);
    /* One loaded row (its columns in order) into *r, whose kind is set; its
     * strings point into the row. False when the row is corrupt. */
    bool (*read)(sqlite3_stmt *st, StoreRecord *r, sqlite3_int64 boot);
} SqlKind;

/* Indexed by StoreRecordKind; every kind has one. */
extern const SqlKind SQL_KINDS[REC_KINDS];

#endif
