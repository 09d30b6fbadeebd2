-- The Ed25519 key the server signs test tickets with (one row; servers sharing the
-- archive share the key, so any of them can issue tickets agents accept).
CREATE TABLE ticket_keys (
    id BIGINT PRIMARY KEY,
    secret_hex TEXT NOT NULL,
    created_us BIGINT NOT NULL
);
