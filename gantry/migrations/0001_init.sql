-- Heartbeat: one row, upserted by `gantry run`, read by `gantry status`.
CREATE TABLE heartbeat (
  id      INTEGER PRIMARY KEY CHECK (id = 1),
  ts      REAL    NOT NULL,   -- unix seconds
  version TEXT    NOT NULL,
  pid     INTEGER NOT NULL
);

-- Conversation history, one row per OpenAI-style message; body is the message as JSON.
CREATE TABLE session_message (
  id         INTEGER PRIMARY KEY,
  session_id TEXT    NOT NULL,   -- "<channel>:<chat>"
  role       TEXT    NOT NULL,   -- system | user | assistant | tool
  body       TEXT    NOT NULL,
  chars      INTEGER NOT NULL,
  created_at REAL    NOT NULL
);
CREATE INDEX session_message_by_session ON session_message (session_id, id);

-- The rolling summary of turns trimmed out of a session's history.
CREATE TABLE session_summary (
  session_id TEXT PRIMARY KEY,
  summary    TEXT NOT NULL,
  updated_at REAL NOT NULL
);
