-- A schema migration fenced with the token of the lock db/migrations (docs/fencing-sql.md,
-- "Schema migrations under a leasegate lock"). Run it in ONE transaction, with the token
-- that `leasegate run` hands its command:
--
--   leasegate run --lock db/migrations --ttl 30s --wait 10m -- \
--     sh -c 'exec psql -X -v ON_ERROR_STOP=1 --single-transaction -v token="$LEASEGATE_TOKEN" -f examples/sql/migration.sql'
--
-- The first statement claims the fence (fence_claim is in schema.sql): a migrator whose
-- token is older than one that has already claimed it gets an error here, psql stops, and
-- nothing of this file is applied. The claim keeps the fence row locked until COMMIT, so a
-- second migrator waits at its own claim until this one is done.

SELECT fence_claim('db/migrations', :'token');

CREATE TABLE IF NOT EXISTS schema_migrations (
    version    text        PRIMARY KEY,
    token      bigint      NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);

ALTER TABLE counters ADD COLUMN IF NOT EXISTS updated_at timestamptz;

INSERT INTO schema_migrations (version, token) VALUES ('0002-counters-updated-at', :'token')
ON CONFLICT (version) DO NOTHING;
