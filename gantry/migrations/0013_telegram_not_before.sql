-- The crash pause as a time (docs/telegram.md, "When something keeps failing"). not_before:
-- the Unix time before which the next attempt on the update does not start, set when the
-- pause begins and cleared when an attempt does; a restart during the pause waits out what is
-- left of it, instead of a whole new pause (a restart storm would otherwise never let it end).
ALTER TABLE telegram_update ADD COLUMN not_before REAL;
