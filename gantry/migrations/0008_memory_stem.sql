-- Recall by word stem (issue 30): `memory_fts` is rebuilt with the Porter stemmer over the
-- same unicode61 tokens, so 'adopted' finds 'adopt' and 'games' finds 'game'. Exact words
-- still rank above stem-only matches: recall re-checks candidates' exact words in Python.
-- External content: the rows themselves are untouched; 'rebuild' re-reads every row.
DROP TRIGGER memory_fts_insert;
DROP TRIGGER memory_fts_delete;
DROP TRIGGER memory_fts_update;
DROP TABLE memory_fts;
CREATE VIRTUAL TABLE memory_fts USING fts5 (
  subject, content, content = 'memory', content_rowid = 'id',
  tokenize = 'porter unicode61 remove_diacritics 2'
);
CREATE TRIGGER memory_fts_insert AFTER INSERT ON memory BEGIN
  INSERT INTO memory_fts (rowid, subject, content) VALUES (new.id, new.subject, new.content);
END;
CREATE TRIGGER memory_fts_delete AFTER DELETE ON memory BEGIN
  INSERT INTO memory_fts (memory_fts, rowid, subject, content)
    VALUES ('delete', old.id, old.subject, old.content);
END;
CREATE TRIGGER memory_fts_update AFTER UPDATE OF subject, content ON memory BEGIN
  INSERT INTO memory_fts (memory_fts, rowid, subject, content)
    VALUES ('delete', old.id, old.subject, old.content);
  INSERT INTO memory_fts (rowid, subject, content) VALUES (new.id, new.subject, new.content);
END;
INSERT INTO memory_fts (memory_fts) VALUES ('rebuild');
