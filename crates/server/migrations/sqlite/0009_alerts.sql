-- Alerts the server raised or apps published, kept for the dashboard's alert list;
-- `agents` is ",a,b," so one agent's alerts are found with LIKE '%,a,%'.
CREATE TABLE alerts (
    id TEXT PRIMARY KEY,
    time_us BIGINT NOT NULL,
    severity TEXT NOT NULL,
    agents TEXT NOT NULL,
    document TEXT NOT NULL
);
CREATE INDEX alerts_time ON alerts (time_us);
