-- SLA verdicts: one per contract and judged result (the verdict document holds the
-- clauses with their measured values, limits and margins).
CREATE TABLE sla_verdicts (
    contract TEXT NOT NULL,
    run_id TEXT NOT NULL,
    client TEXT NOT NULL,
    server TEXT NOT NULL,
    time_us BIGINT NOT NULL,
    pass BIGINT NOT NULL,
    document TEXT NOT NULL,
    PRIMARY KEY (contract, run_id)
);
CREATE INDEX sla_verdicts_pair_time ON sla_verdicts (contract, client, server, time_us);
CREATE INDEX sla_verdicts_time ON sla_verdicts (time_us);
