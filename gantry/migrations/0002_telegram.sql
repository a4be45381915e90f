-- Telegram exactly-once delivery: the next getUpdates offset and every accepted update.
CREATE TABLE telegram_state (
  id          INTEGER PRIMARY KEY CHECK (id = 1),
  next_offset INTEGER NOT NULL
);

CREATE TABLE telegram_update (
  update_id   INTEGER PRIMARY KEY,
  chat_id     INTEGER NOT NULL,
  user_id     INTEGER NOT NULL,
  message_id  INTEGER NOT NULL,
  text        TEXT    NOT NULL,
  state       TEXT    NOT NULL,            -- accepted | replied | answered
  reply       TEXT,                        -- set once the agent answered (state replied)
  sent_parts  INTEGER NOT NULL DEFAULT 0,  -- message parts already delivered
  stream_msgs TEXT    NOT NULL DEFAULT '[]', -- message ids a streamed reply occupies
  received_at REAL    NOT NULL,
  answered_at REAL
);
CREATE INDEX telegram_update_pending ON telegram_update (chat_id, update_id)
  WHERE state != 'answered';
