-- Watches (docs/watch.md): an MCP tool polled, or a resource subscribed to, whose new items
-- wake a turn in the chat that asked. Times are unix seconds, UTC.
CREATE TABLE watch (
  id           INTEGER PRIMARY KEY,
  session_id   TEXT    NOT NULL,           -- "<channel>:<chat>" the watch was added from
  server       TEXT    NOT NULL,           -- MCP server (manifest name)
  tool         TEXT,                       -- MCP tool name (a tool watch), else NULL
  exposed      TEXT,                       -- the tool as the model named it ({server}__{tool})
  args         TEXT    NOT NULL DEFAULT '{}', -- the tool's arguments, JSON
  uri          TEXT,                       -- the resource URI (a resource watch), else NULL
  id_field     TEXT    NOT NULL DEFAULT 'id', -- the item field that identifies an item
  label        TEXT    NOT NULL,
  instruction  TEXT    NOT NULL,           -- what the woken turn is told to do with new items
  interval_s   REAL    NOT NULL,           -- seconds between polls (resource watches: when not pushed)
  state        TEXT    NOT NULL,           -- active | paused | cancelled
  next_at      REAL,                       -- next poll; NULL once the watch is over
  cursor       TEXT,                       -- JSON list of item ids seen; NULL until the first poll
  failures     INTEGER NOT NULL DEFAULT 0, -- failed polls in a row
  last_error   TEXT,
  polls        INTEGER NOT NULL DEFAULT 0, -- successful polls
  notice       TEXT,                       -- the one message a pause sends
  notice_state TEXT,                       -- pending | sent | failed
  created_at   REAL    NOT NULL,
  ended_at     REAL
);
CREATE INDEX watch_due ON watch (next_at) WHERE state = 'active';

-- One row per wake: written with the watch's new cursor in one transaction, then run as a
-- turn like a cron run (started → replied → delivered | silent | failed), so a kill -9 at any
-- point neither loses new items nor wakes the agent twice for them.
CREATE TABLE watch_wake (
  id          INTEGER PRIMARY KEY,
  watch_id    INTEGER NOT NULL REFERENCES watch (id),
  items       TEXT    NOT NULL,            -- JSON list of the new items
  total       INTEGER NOT NULL,            -- how many new items (items may hold fewer: bounded)
  state       TEXT    NOT NULL,            -- started | replied | delivered | silent | failed
  attempts    INTEGER NOT NULL DEFAULT 0,  -- turns started for this wake
  reply       TEXT,
  sent_parts  INTEGER NOT NULL DEFAULT 0,
  error       TEXT,
  created_at  REAL    NOT NULL,
  finished_at REAL
);
CREATE INDEX watch_wake_open ON watch_wake (watch_id) WHERE state IN ('started', 'replied');
