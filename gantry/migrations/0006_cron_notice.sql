-- Cron failure notices (docs/cron.md, "When a job keeps failing"): the run whose failure
-- made FAILURE_NOTICE_AFTER in a row carries the one notice the user gets for that streak.
-- It is written in the transaction that records the failure and pushed after, so a restart
-- resumes a pending notice instead of losing it.
ALTER TABLE cron_run ADD COLUMN notice TEXT;        -- the notice's text; NULL on other runs
ALTER TABLE cron_run ADD COLUMN notice_state TEXT;  -- pending | sent | failed
