-- The usage ledger (docs/models.md, "Usage and prices"): one row per model call (an HTTP
-- attempt). A row is opened, committed, before the request goes out; it is closed ('done',
-- with the tokens the server reported) in the same transaction as the turn state the reply
-- became, or at once as 'failed'. A row still 'open' at boot was cut by a kill: it becomes
-- 'lost', counted once as billed with its estimated prompt. Times are unix seconds.
CREATE TABLE usage (
  id                INTEGER PRIMARY KEY,
  started_at        REAL    NOT NULL,
  ended_at          REAL,
  source            TEXT    NOT NULL,          -- chat | cron:<job> | watch:<id> | consolidation | summary | transcription
  chat              TEXT,                      -- "<channel>:<chat>" when a chat's turn, else NULL
  model             TEXT    NOT NULL,
  endpoint          TEXT    NOT NULL,          -- base URL, without credentials
  state             TEXT    NOT NULL,          -- open | done | failed | lost
  prompt_estimate   INTEGER NOT NULL DEFAULT 0, -- prompt tokens estimated before the call
  prompt_tokens     INTEGER NOT NULL DEFAULT 0,
  completion_tokens INTEGER NOT NULL DEFAULT 0,
  cached_tokens     INTEGER NOT NULL DEFAULT 0, -- prompt_tokens_details.cached_tokens
  estimated         INTEGER NOT NULL DEFAULT 0, -- 1: the server reported no usage; gantry estimated
  cost              REAL,                      -- USD; NULL when LLM_PRICES has no price for the model
  reply_id          TEXT                       -- the server's id of the reply, when it sent one
);
CREATE INDEX usage_started ON usage (started_at);
CREATE INDEX usage_open ON usage (state) WHERE state = 'open';
