-- Voice replies and reactions on Telegram (docs/telegram.md, "Voice replies" and "Reactions").
-- telegram_update.voice: the reply is also spoken (a voice note came in, or the chat asked
-- with /voice on), decided on arrival so a resumed delivery sends the same parts.
ALTER TABLE telegram_update ADD COLUMN voice INTEGER NOT NULL DEFAULT 0;

-- A chat's own settings: voice 1 after /voice on, 0 after /voice off.
CREATE TABLE telegram_chat (
  chat_id INTEGER PRIMARY KEY,
  voice   INTEGER NOT NULL DEFAULT 0
);

-- The messages gantry sent as a reply (one row per Telegram message), so a user's reaction
-- can be told apart from one to a message that is not gantry's, and placed.
CREATE TABLE telegram_sent (
  chat_id    INTEGER NOT NULL,
  message_id INTEGER NOT NULL,
  update_id  INTEGER NOT NULL,   -- the update the reply answered
  sent_at    REAL    NOT NULL,
  PRIMARY KEY (chat_id, message_id)
);

-- A user's reaction to one of gantry's replies: light feedback, shown to the model in that
-- user's next turn (seen = 1 once a turn that carried it has its answer stored).
CREATE TABLE telegram_reaction (
  chat_id    INTEGER NOT NULL,
  message_id INTEGER NOT NULL,
  user_id    INTEGER NOT NULL,
  emoji      TEXT    NOT NULL,
  at         REAL    NOT NULL,
  seen       INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (chat_id, message_id, user_id)
);
