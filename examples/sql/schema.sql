-- The tables the SQL examples write to, and the fence table of docs/fencing-sql.md.
-- PostgreSQL 9.5 or newer (ON CONFLICT). Apply once, e.g.
--   psql -X -v ON_ERROR_STOP=1 -f examples/sql/schema.sql
-- Running it again changes nothing.

-- Pattern 1, the fence in the row: `fence` is the highest fencing token that has written
-- the row. A write sets it to its own token, on the condition `fence <= token`.
CREATE TABLE IF NOT EXISTS counters (
    id    text   PRIMARY KEY,
    value bigint NOT NULL DEFAULT 0,
    fence bigint NOT NULL DEFAULT 0
);

-- Pattern 2, a fence table: one row per resource (named after the lock that protects it),
-- raised in the same transaction as the writes it protects, whatever rows and tables they
-- touch. Its row stays locked until that transaction ends, so the writes under one
-- resource commit one at a time, in token order.
CREATE TABLE IF NOT EXISTS fences (
    resource text   PRIMARY KEY,
    fence    bigint NOT NULL
);

-- What the examples write under pattern 2: one row per write, numbered 1, 2, 3, ... per
-- counter. The numbering reads the previous number after the fence is claimed, which is
-- safe only because every writer of a counter claims the same fence first.
CREATE TABLE IF NOT EXISTS counter_entries (
    counter text   NOT NULL,
    n       bigint NOT NULL,
    token   bigint NOT NULL,
    owner   text   NOT NULL,
    PRIMARY KEY (counter, n)
);

-- Pattern 2 as one call that raises an error when the token is stale, for clients that
-- cannot look at RETURNING (a psql script with ON_ERROR_STOP, a migration tool):
--   SELECT fence_claim('db/migrations', 42);
-- in the transaction it protects. Returns the token; a stale one aborts the transaction.
CREATE OR REPLACE FUNCTION fence_claim(p_resource text, p_token bigint) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    claimed bigint;
    newest  bigint;
BEGIN
    INSERT INTO fences AS f (resource, fence) VALUES (p_resource, p_token)
    ON CONFLICT (resource) DO UPDATE SET fence = EXCLUDED.fence
    WHERE f.fence <= EXCLUDED.fence
    RETURNING f.fence INTO claimed;
    IF claimed IS NULL THEN
        SELECT f.fence INTO newest FROM fences AS f WHERE f.resource = p_resource;
        RAISE EXCEPTION 'stale fencing token % for "%": its fence is %', p_token, p_resource, newest
            USING HINT = 'A newer holder of the lock has written; this transaction must not.';
    END IF;
    RETURN claimed;
END
$$;
