-- Budget notices (docs/models.md, "Budgets"): a warning at BUDGET_WARN_PERCENT and a "limit
-- reached" for the autonomous turns skipped, each once per limit and period. The row is
-- written before the push, so a restart neither sends it again nor loses it.
CREATE TABLE budget_notice (
  key        TEXT PRIMARY KEY,         -- "<warn|reached>:<BUDGET_… variable>:<period, YYYY-MM-DD | YYYY-MM>"
  session_id TEXT    NOT NULL,         -- "<channel>:<chat>" it is pushed to
  text       TEXT    NOT NULL,
  state      TEXT    NOT NULL,         -- pending | sent | failed
  created_at REAL    NOT NULL
);
CREATE INDEX budget_notice_pending ON budget_notice (state) WHERE state = 'pending';
