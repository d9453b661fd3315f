-- Random against time-ordered (version-7) uuid keys: 200,000 new keys, 500 a statement, into a
-- uuid key index that already holds 2,000,000 random ones, each run right after a checkpoint.
-- Prints each run's time and the WAL it wrote. Run it on a scratch database:
--   psql "$URL" -c 'CREATE DATABASE uuid_keys'; psql "$URL_OF_uuid_keys" -f Benchmarks/sql/uuid-key-order.sql
-- (CHECKPOINT needs a superuser or the pg_checkpoint role.)
\timing on
CREATE TABLE random_keys (id uuid PRIMARY KEY, x int);
CREATE TABLE ordered_keys (id uuid PRIMARY KEY, x int);
INSERT INTO random_keys SELECT gen_random_uuid(), 1 FROM generate_series(1, 2000000);
INSERT INTO ordered_keys SELECT id, 1 FROM random_keys;
-- The new keys, made beforehand so that only their order differs: random (version 4), and
-- version 7 (48 bits of Unix milliseconds, 50 keys a millisecond, then random bits).
CREATE TABLE new_random AS SELECT g, gen_random_uuid() AS id FROM generate_series(1, 200000) g;
CREATE TABLE new_ordered AS
    SELECT g, encode(substring(int8send(1764650000000 + g / 50) FROM 3) || '\x70'::bytea
                     || substring(uuid_send(gen_random_uuid()) FROM 8), 'hex')::uuid AS id
    FROM generate_series(1, 200000) g;
CREATE INDEX ON new_random (g);
CREATE INDEX ON new_ordered (g);
VACUUM ANALYZE random_keys, ordered_keys, new_random, new_ordered;
CHECKPOINT;
SELECT pg_current_wal_lsn() AS start \gset
DO $$ BEGIN FOR i IN 0..399 LOOP
    INSERT INTO random_keys SELECT id, 2 FROM new_random WHERE g > i * 500 AND g <= (i + 1) * 500;
END LOOP; END $$;
SELECT pg_size_pretty(pg_wal_lsn_diff(pg_current_wal_lsn(), :'start')) AS wal_random;
CHECKPOINT;
SELECT pg_current_wal_lsn() AS start \gset
DO $$ BEGIN FOR i IN 0..399 LOOP
    INSERT INTO ordered_keys SELECT id, 2 FROM new_ordered WHERE g > i * 500 AND g <= (i + 1) * 500;
END LOOP; END $$;
SELECT pg_size_pretty(pg_wal_lsn_diff(pg_current_wal_lsn(), :'start')) AS wal_ordered;
DROP TABLE random_keys, ordered_keys, new_random, new_ordered;
