-- The stored bodies (the archive's payload, a forwarding job's raw body) are
-- compressed with lz4 rather than PostgreSQL's default pglz: a body of a few
-- KiB crosses the TOAST threshold, so every delivery compresses one, and
-- pglz was the largest single cost of PostgreSQL's work per delivery
-- (bench/RESULTS.md, "Instructions per delivery"), lz4 a fraction of it for
-- a similar size. Only rows written from now on; old rows keep pglz and
-- read as before. A server built without lz4 keeps pglz: nothing else
-- depends on the method.
DO $$
BEGIN
    ALTER TABLE webhook_events ALTER COLUMN payload SET COMPRESSION lz4;
    ALTER TABLE destination_jobs ALTER COLUMN body SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported THEN
    RAISE NOTICE 'this server has no lz4: payloads stay compressed with pglz';
END
$$;
