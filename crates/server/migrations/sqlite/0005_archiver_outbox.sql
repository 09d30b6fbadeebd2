-- Deliveries of stored results to file and HTTP archivers, kept until they succeed
-- (or are given up), so a server restart or a receiver outage loses none.
CREATE TABLE archiver_outbox (
    run_id TEXT NOT NULL,
    archiver TEXT NOT NULL,
    attempts INTEGER NOT NULL,
    next_attempt_us INTEGER NOT NULL,
    last_error TEXT,
    created_us INTEGER NOT NULL,
    PRIMARY KEY (run_id, archiver)
);
CREATE INDEX archiver_outbox_due ON archiver_outbox (next_attempt_us);
