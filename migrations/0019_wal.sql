-- outbox 0019: fewer WAL bytes per delivery (bench/history_volume.py; bench/README.md).
DO $$
BEGIN
    IF (SELECT relkind FROM pg_class WHERE oid = 'deliveries'::regclass) = 'r' THEN
        ALTER TABLE deliveries SET (fillfactor = 50);
    END IF;
END
$$;
