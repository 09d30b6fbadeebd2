-- vantage archive, PostgreSQL flavour. Times are microseconds since the Unix epoch (UTC);
-- JSON documents are stored as TEXT. Keep in step with ../sqlite/0001_init.sql.
CREATE TABLE tokens (
    token_sha256 TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    role TEXT NOT NULL,
    created_us BIGINT NOT NULL
);

CREATE TABLE agents (
    name TEXT PRIMARY KEY,
    addresses TEXT NOT NULL,
    endpoint_port BIGINT NOT NULL,
    tags TEXT NOT NULL,
    capabilities TEXT NOT NULL,
    accepts_inbound BIGINT NOT NULL,
    registered_us BIGINT NOT NULL,
    last_seen_us BIGINT NOT NULL
);

CREATE TABLE configs (
    version BIGINT PRIMARY KEY,
    applied_us BIGINT NOT NULL,
    document TEXT NOT NULL
);

CREATE TABLE requests (
    id TEXT PRIMARY KEY,
    document TEXT NOT NULL,
    state TEXT NOT NULL,
    created_us BIGINT NOT NULL
);

CREATE TABLE runs (
    id TEXT PRIMARY KEY,
    task TEXT NOT NULL,
    test TEXT NOT NULL,
    test_name TEXT NOT NULL,
    client TEXT NOT NULL,
    server TEXT NOT NULL,
    spec TEXT NOT NULL,
    exclusive BIGINT NOT NULL,
    reverse BIGINT NOT NULL,
    priority BIGINT NOT NULL,
    claims TEXT NOT NULL,
    planned_start_us BIGINT NOT NULL,
    planned_end_us BIGINT NOT NULL,
    actual_start_us BIGINT,
    actual_end_us BIGINT,
    state TEXT NOT NULL,
    reason TEXT,
    created_us BIGINT NOT NULL
);
CREATE INDEX runs_client_state ON runs (client, state, planned_start_us);
CREATE INDEX runs_state_end ON runs (state, planned_end_us);

CREATE TABLE results (
    run_id TEXT PRIMARY KEY,
    test TEXT NOT NULL,
    client TEXT NOT NULL,
    server TEXT NOT NULL,
    start_us BIGINT NOT NULL,
    end_us BIGINT NOT NULL,
    received_us BIGINT NOT NULL,
    outcome TEXT NOT NULL,
    error TEXT,
    raw TEXT NOT NULL,
    rtt_min_us DOUBLE PRECISION,
    rtt_median_us DOUBLE PRECISION,
    rtt_p95_us DOUBLE PRECISION,
    loss_ratio DOUBLE PRECISION,
    jitter_us DOUBLE PRECISION,
    sent_bps DOUBLE PRECISION,
    received_bps DOUBLE PRECISION,
    retransmits DOUBLE PRECISION
);
CREATE INDEX results_pair_time ON results (client, server, test, start_us);
CREATE INDEX results_time ON results (start_us);

CREATE TABLE app_metrics (
    id BIGSERIAL PRIMARY KEY,
    name TEXT NOT NULL,
    value DOUBLE PRECISION NOT NULL,
    unit TEXT NOT NULL,
    time_us BIGINT NOT NULL,
    tags TEXT NOT NULL,
    publisher TEXT NOT NULL
);
CREATE INDEX app_metrics_name_time ON app_metrics (name, time_us);
CREATE INDEX app_metrics_time ON app_metrics (time_us);

CREATE TABLE leases (
    name TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    expires_us BIGINT NOT NULL
);

CREATE TABLE planner_state (
    name TEXT PRIMARY KEY,
    value BIGINT NOT NULL
);
