-- A handed-out light run that reports gets no row in `runs`: its result is the record
-- of how it went, and its plan stays in its hand-out, which the planner's sweep now
-- keeps (after storing the runs without a result as missed) instead of deleting; the
-- planner mark `handouts_swept_until` says which are swept. Retention deletes swept
-- hand-outs with the runs of their age. A row per completed light run was, with its
-- three index entries, about half of what storing a result wrote.
--
-- An upload's check reads one agent's hand-outs around its measured times, among all
-- it has kept.
CREATE INDEX light_handouts_client_reach ON light_handouts (client, reach_us);
