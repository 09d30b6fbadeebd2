-- Light runs (latency meshes and other shared tests) handed out to their client agent
-- at its fetch: one row per fetch that handed any out, holding its runs in a compact
-- JSON document, rather than a row per run written at hand-out and again with its
-- result (a thousand-agent mesh hands out 16 650 runs a second). A run gets its row in
-- `runs` with its result; the planner sweeps a hand-out once every run of it is
-- overdue, records the runs without a result as missed, and deletes it.
CREATE TABLE light_handouts (
    client TEXT NOT NULL,
    -- The window of nominal starts the fetch placed, [from_us, until_us).
    from_us INTEGER NOT NULL,
    until_us INTEGER NOT NULL,
    -- The earliest planned start and the latest planned end of its runs.
    first_start_us INTEGER NOT NULL,
    reach_us INTEGER NOT NULL,
    runs TEXT NOT NULL,
    PRIMARY KEY (client, from_us)
);
CREATE INDEX light_handouts_client_until ON light_handouts (client, until_us);
CREATE INDEX light_handouts_reach ON light_handouts (reach_us);
