-- A leasegate database of schema version 9 (the base of src/store/store_sqlite.c's SCHEMA_V9),
-- written by hand with rows of every kind that version keeps: 300 locks (100 held by a
-- writer, kept in the lock's row), fence marks, guard marks, ended leases, revoked tokens and
-- 3,000 audit rows (which the step to version 10 rewrites). Loaded by tests/powerloss
-- (powerloss.load_fixture), which shifts the times to the present; the migration cuts start
-- servers on it.
BEGIN TRANSACTION;
CREATE TABLE meta(key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE locks(
  name TEXT PRIMARY KEY, last_token INTEGER NOT NULL,
  lease BLOB, owner TEXT, token INTEGER, ttl_ms INTEGER, acquired_at_ms INTEGER,
  expires_at_ms INTEGER, count INTEGER, metadata TEXT, deadline_ms INTEGER, boot INTEGER,
  request_id TEXT, key TEXT) WITHOUT ROWID;
CREATE TABLE fences(resource TEXT PRIMARY KEY, max_token INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE fence_floors(bucket INTEGER PRIMARY KEY, floor INTEGER NOT NULL);
CREATE TABLE guard_marks(lock TEXT PRIMARY KEY, max_token INTEGER NOT NULL, at_ms INTEGER NOT NULL DEFAULT 0)
  WITHOUT ROWID;
CREATE TABLE lease_history(seq INTEGER PRIMARY KEY, lease BLOB NOT NULL, lock TEXT NOT NULL, token INTEGER NOT NULL,
  how INTEGER NOT NULL);
CREATE TABLE revoked(token INTEGER PRIMARY KEY, lock TEXT NOT NULL);
CREATE TABLE audit(seq INTEGER PRIMARY KEY, at_ms INTEGER NOT NULL, kind INTEGER NOT NULL, lock TEXT NOT NULL,
  owner TEXT NOT NULL, token INTEGER NOT NULL, key TEXT NOT NULL, peer TEXT NOT NULL);
INSERT INTO meta(key, value) VALUES('schema_version', 9), ('last_token', 0), ('boot', 3), ('boot_id', 'fixture-v9');
-- Lock i (1..300) has issued tokens up to 2i; every third is held by a writer with token 2i.
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 300)
INSERT INTO locks(name, last_token, lease, owner, token, ttl_ms, acquired_at_ms, expires_at_ms, count, metadata,
                  deadline_ms, boot, request_id, key)
  SELECT printf('fx9/k%03d', i), 2 * i,
         CASE WHEN i % 3 = 0 THEN randomblob(16) END, CASE WHEN i % 3 = 0 THEN 'writer' || i END,
         CASE WHEN i % 3 = 0 THEN 2 * i END, CASE WHEN i % 3 = 0 THEN 3600000 END,
         CASE WHEN i % 3 = 0 THEN 1795000000000 + i END, CASE WHEN i % 3 = 0 THEN 1795003600000 + i END,
         CASE WHEN i % 3 = 0 THEN 1 + i % 2 END, CASE WHEN i % 3 = 0 THEN '{"fixture":' || i || '}' END,
         CASE WHEN i % 3 = 0 THEN 123456 END, CASE WHEN i % 3 = 0 THEN 3 END,
         CASE WHEN i % 6 = 0 THEN 'req-' || i END, NULL
  FROM n;
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 100)
INSERT INTO fences(resource, max_token) SELECT printf('fx9/f%03d', i), 2 * i + 1 FROM n;
INSERT INTO fence_floors(bucket, floor) VALUES(7, 3), (200, 11);
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 30)
INSERT INTO guard_marks(lock, max_token, at_ms) SELECT printf('fx9/k%03d', 3 * i), 6 * i, 1795000000000 FROM n;
-- Ended leases of locks 1..200: expired, released or revoked (the revoked ones in revoked too).
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 400)
INSERT INTO lease_history(seq, lease, lock, token, how)
  SELECT i, randomblob(16), printf('fx9/k%03d', 1 + (i - 1) % 200), 2 * (1 + (i - 1) % 200) - 1, 1 + i % 3 FROM n;
INSERT INTO revoked(token, lock) SELECT token, lock FROM lease_history WHERE how = 3 AND seq <= 30;
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3000)
INSERT INTO audit(seq, at_ms, kind, lock, owner, token, key, peer)
  SELECT i, 1794990000000 + i, 1 + i % 5, printf('fx9/k%03d', 1 + i % 300), 'owner' || (i % 7), 1 + i % 600, '',
         '127.0.0.1'
  FROM n;
UPDATE meta SET value = 600 WHERE key = 'last_token';
COMMIT;
