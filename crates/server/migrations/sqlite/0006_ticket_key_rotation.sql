-- Ticket key rotation: one row per key generation (id). The newest key whose
-- signs_from_us has passed signs tickets; agents trust every key not yet retired
-- (retired_us NULL or in the future), so tickets signed before a rotation stay valid
-- until the previous key retires.
ALTER TABLE ticket_keys ADD COLUMN signs_from_us INTEGER NOT NULL DEFAULT 0;
ALTER TABLE ticket_keys ADD COLUMN retired_us INTEGER;
