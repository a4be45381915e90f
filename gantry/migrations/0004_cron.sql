-- Cron: scheduled turns (docs/cron.md). Times are unix seconds, UTC.
CREATE TABLE cron_job (
  id         INTEGER PRIMARY KEY,
  session_id TEXT    NOT NULL,            -- "<channel>:<chat>" the job was scheduled from
  kind       TEXT    NOT NULL,            -- once | cron | every
  spec       TEXT    NOT NULL,            -- ISO instant | cron expression | interval seconds
  label      TEXT    NOT NULL,            -- as a person reads it ("every day at 07:30")
  tz         TEXT    NOT NULL,            -- CRON_TZ when scheduled (wall times mean this zone)
  prompt     TEXT    NOT NULL,            -- what the synthetic user turn says
  state      TEXT    NOT NULL,            -- active | done | cancelled | missed | failed
  next_at    REAL,                        -- next fire; NULL once the job is over
  anchor_at  REAL    NOT NULL,            -- "every N": intervals count from here
  created_at REAL    NOT NULL,
  ended_at   REAL
);
CREATE INDEX cron_job_due ON cron_job (next_at) WHERE state = 'active';

-- One row per fire: claimed (and the job advanced) in one transaction before the turn runs,
-- so a crash at any point resumes this row instead of losing or repeating the fire.
CREATE TABLE cron_run (
  id          INTEGER PRIMARY KEY,
  job_id      INTEGER NOT NULL REFERENCES cron_job (id),
  due_at      REAL    NOT NULL,
  state       TEXT    NOT NULL,           -- started | replied | delivered | silent | skipped | missed | failed
  attempts    INTEGER NOT NULL DEFAULT 0, -- turns started for this fire
  reply       TEXT,
  sent_parts  INTEGER NOT NULL DEFAULT 0, -- message parts already pushed
  error       TEXT,
  started_at  REAL    NOT NULL,
  finished_at REAL,
  UNIQUE (job_id, due_at)
);
CREATE INDEX cron_run_open ON cron_run (job_id) WHERE state IN ('started', 'replied');
