-- The dashboard's in-memory views catch up with the results received since their
-- last read (crates/server/src/recent.rs).
CREATE INDEX results_received ON results (received_us);
