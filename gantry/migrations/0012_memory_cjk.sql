-- CJK words inside longer runs (issue 35): unicode61 makes '我的猫叫小白' one token, so
-- '小白' could not be found. `grams` holds the run's letters and overlapping letter pairs
-- (ranking.grams, written by gantry), and memory_fts indexes it as a third column; text
-- without CJK letters has '' there and is indexed as before. NULL = not computed yet: gantry
-- fills those rows when it opens the store (every row after this migration, and rows added
-- with sqlite3). A sqlite3 UPDATE of subject or content sets it back to NULL.
ALTER TABLE memory ADD COLUMN grams TEXT;
CREATE INDEX memory_grams_pending ON memory (id) WHERE grams IS NULL;
DROP TRIGGER memory_fts_insert;
DROP TRIGGER memory_fts_delete;
DROP TRIGGER memory_fts_update;
DROP TABLE memory_fts;
CREATE VIRTUAL TABLE memory_fts USING fts5 (
  subject, content, grams, content = 'memory', content_rowid = 'id',
  tokenize = 'porter unicode61 remove_diacritics 2'
);
CREATE TRIGGER memory_fts_insert AFTER INSERT ON memory BEGIN
  INSERT INTO memory_fts (rowid, subject, content, grams)
    VALUES (new.id, new.subject, new.content, new.grams);
END;
CREATE TRIGGER memory_fts_delete AFTER DELETE ON memory BEGIN
  INSERT INTO memory_fts (memory_fts, rowid, subject, content, grams)
    VALUES ('delete', old.id, old.subject, old.content, old.grams);
END;
-- Text changed but grams not (an edit with sqlite3): the old grams are stale, so the row is
-- indexed without them and marked NULL for gantry to fill. Filling NULL with '' (no CJK)
-- changes nothing indexed and skips the re-index.
CREATE TRIGGER memory_fts_update AFTER UPDATE OF subject, content, grams ON memory
WHEN old.subject IS NOT new.subject OR old.content IS NOT new.content
  OR coalesce(old.grams, '') IS NOT coalesce(new.grams, '')
BEGIN
  INSERT INTO memory_fts (memory_fts, rowid, subject, content, grams)
    VALUES ('delete', old.id, old.subject, old.content, old.grams);
  INSERT INTO memory_fts (rowid, subject, content, grams)
    VALUES (new.id, new.subject, new.content,
            CASE WHEN new.grams IS old.grams THEN NULL ELSE new.grams END);
  UPDATE memory SET grams = NULL WHERE id = new.id AND new.grams IS old.grams
    AND new.grams IS NOT NULL;
END;
INSERT INTO memory_fts (memory_fts) VALUES ('rebuild');
