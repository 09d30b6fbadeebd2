-- Packets a capture run uploaded when its spec asked for them (upload_packets), kept
-- apart from the result document so result queries stay small; served by
-- GET /api/v1/captures/packets?run_id=RUN_ID and removed with the result by retention.
CREATE TABLE capture_packets (
    run_id TEXT PRIMARY KEY,
    start_us INTEGER NOT NULL,
    pcapng BLOB NOT NULL
);
CREATE INDEX capture_packets_start ON capture_packets (start_us);
