-- Failure accounting for Telegram updates (docs/telegram.md, "When something keeps failing").
-- attempts: consecutive processing attempts that crashed or failed unexpectedly; past the
-- limit the update is finished as failed instead of retried forever. error: why an update
-- ended failed or undeliverable. Terminal states are now answered | failed | undeliverable.
ALTER TABLE telegram_update ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE telegram_update ADD COLUMN error TEXT;
DROP INDEX telegram_update_pending;
CREATE INDEX telegram_update_pending ON telegram_update (chat_id, update_id)
  WHERE state IN ('accepted', 'replied');
