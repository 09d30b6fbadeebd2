-- A hand-out's runs (some 140 KB of JSON per fetch in a thousand-agent mesh) are
-- stored out of line and compressed; PostgreSQL's default compression (pglz) took a
-- large share of the database's CPU at that rate, and lz4 compresses several times
-- faster. A server built without lz4 keeps pglz, and says so.
DO $$
BEGIN
    ALTER TABLE light_handouts ALTER COLUMN runs SET COMPRESSION lz4;
EXCEPTION
    WHEN feature_not_supported OR invalid_parameter_value THEN
        RAISE NOTICE 'light_handouts.runs keeps the default compression: %', SQLERRM;
END
$$;
