-- The vantage version an agent reports when it registers (absent from older agents).
ALTER TABLE agents ADD COLUMN version TEXT;
