-- Crashes counted apart from failures (docs/telegram.md, "When something keeps failing").
-- in_flight: an attempt on the update has begun and not ended; found set at the next
-- attempt, it means the process died during that one (a crash). crashes: consecutive such
-- attempts. attempts now counts only attempts that ended in an ordinary failure.
ALTER TABLE telegram_update ADD COLUMN crashes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE telegram_update ADD COLUMN in_flight INTEGER NOT NULL DEFAULT 0;
-- Before this, attempts counted every begun attempt, crashed ones included: a pending row's
-- count is taken as crashes, the more lenient limit.
UPDATE telegram_update SET crashes = attempts, attempts = 0
  WHERE state IN ('accepted', 'replied');
