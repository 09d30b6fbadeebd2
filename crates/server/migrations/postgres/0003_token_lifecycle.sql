-- Tokens may expire and be revoked (a revoked token stays listed, refused).
ALTER TABLE tokens ADD COLUMN expires_us BIGINT;
ALTER TABLE tokens ADD COLUMN revoked_us BIGINT;
