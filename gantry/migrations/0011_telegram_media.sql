-- Media of Telegram updates (docs/telegram.md, "Photos, voice and documents"). media: the
-- files to read, a JSON list of gantry.media.Media (file ids, names, announced sizes), so a
-- turn cut by a crash is rebuilt by downloading them again. media_group: the album the
-- message belongs to (Telegram's media_group_id); an album is answered as one turn.
ALTER TABLE telegram_update ADD COLUMN media TEXT NOT NULL DEFAULT '[]';
ALTER TABLE telegram_update ADD COLUMN media_group TEXT;
