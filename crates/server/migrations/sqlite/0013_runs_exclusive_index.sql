-- Exclusive runs (throughput, capacity) by end time: the planner and the placement of
-- light runs at fetch look for them in a window on every pass and every fetch, among
-- light runs that a full mesh stores at N x (N - 1) a minute.
CREATE INDEX runs_exclusive_end ON runs (planned_end_us) WHERE exclusive <> 0;
