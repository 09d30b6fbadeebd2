-- Summary metrics move from fixed columns of `results` to one row per run and
-- metric name, so a test kind that exports a new metric needs no schema change.
-- Existing values are copied over; the old columns are dropped.
-- The run's pair, test and start are repeated here so that a series (one metric of
-- one pair over time) is one index range scan, without a join; the index carries the
-- value too, so the scan never visits the table (an index-only scan, 10 000 rows of a
-- week read from ~90 index pages instead of one table page each).
CREATE TABLE result_metrics (
    run_id TEXT NOT NULL,
    name TEXT NOT NULL,
    value DOUBLE PRECISION NOT NULL,
    start_us BIGINT NOT NULL,
    client TEXT NOT NULL,
    server TEXT NOT NULL,
    test TEXT NOT NULL,
    PRIMARY KEY (run_id, name)
);
CREATE INDEX result_metrics_series ON result_metrics (name, client, server, test, start_us) INCLUDE (value);
-- Index-only scans skip the table only for pages the visibility map marks all-visible,
-- which a VACUUM sets. This table is append-mostly, where autovacuum's default (after
-- inserts of 20 % of the table) would leave the newest weeks, the most queried, unmarked.
ALTER TABLE result_metrics SET (autovacuum_vacuum_insert_scale_factor = 0.01);
INSERT INTO result_metrics (run_id, name, value, start_us, client, server, test) SELECT run_id, 'rtt_min_us', rtt_min_us, start_us, client, server, test FROM results WHERE rtt_min_us IS NOT NULL;
INSERT INTO result_metrics (run_id, name, value, start_us, client, server, test) SELECT run_id, 'rtt_median_us', rtt_median_us, start_us, client, server, test FROM results WHERE rtt_median_us IS NOT NULL;
INSERT INTO result_metrics (run_id, name, value, start_us, client, server, test) SELECT run_id, 'rtt_p95_us', rtt_p95_us, start_us, client, server, test FROM results WHERE rtt_p95_us IS NOT NULL;
INSERT INTO result_metrics (run_id, name, value, start_us, client, server, test) SELECT run_id, 'loss_ratio', loss_ratio, start_us, client, server, test FROM results WHERE loss_ratio IS NOT NULL;
INSERT INTO result_metrics (run_id, name, value, start_us, client, server, test) SELECT run_id, 'jitter_us', jitter_us, start_us, client, server, test FROM results WHERE jitter_us IS NOT NULL;
INSERT INTO result_metrics (run_id, name, value, start_us, client, server, test) SELECT run_id, 'sent_bps', sent_bps, start_us, client, server, test FROM results WHERE sent_bps IS NOT NULL;
INSERT INTO result_metrics (run_id, name, value, start_us, client, server, test) SELECT run_id, 'received_bps', received_bps, start_us, client, server, test FROM results WHERE received_bps IS NOT NULL;
INSERT INTO result_metrics (run_id, name, value, start_us, client, server, test) SELECT run_id, 'retransmits', retransmits, start_us, client, server, test FROM results WHERE retransmits IS NOT NULL;
ALTER TABLE results DROP COLUMN rtt_min_us;
ALTER TABLE results DROP COLUMN rtt_median_us;
ALTER TABLE results DROP COLUMN rtt_p95_us;
ALTER TABLE results DROP COLUMN loss_ratio;
ALTER TABLE results DROP COLUMN jitter_us;
ALTER TABLE results DROP COLUMN sent_bps;
ALTER TABLE results DROP COLUMN received_bps;
ALTER TABLE results DROP COLUMN retransmits;

-- Agents advertise their iperf3-compatible listener (runs with tool = "iperf3").
ALTER TABLE agents ADD COLUMN iperf3_port BIGINT;
-- A run whose server side is an external host (not an agent) names it here, as
-- HOST or HOST:PORT; NULL for runs between agents.
ALTER TABLE runs ADD COLUMN target TEXT;
