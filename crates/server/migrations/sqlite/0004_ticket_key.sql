-- The Ed25519 key the server signs test tickets with (one row; servers sharing the
-- archive share the key, so any of them can issue tickets agents accept).
CREATE TABLE ticket_keys (
    id INTEGER PRIMARY KEY,
    secret_hex TEXT NOT NULL,
    created_us INTEGER NOT NULL
);
