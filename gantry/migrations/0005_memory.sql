-- Long-term memory (spec §7.1): typed, atomic statements; readable and deletable with sqlite3.
-- Times are UTC ISO 8601 text with microseconds ('2026-03-01T12:00:00.000000Z'), so they sort
-- as text and SQLite's datetime functions read them.
CREATE TABLE memory (
  id            INTEGER PRIMARY KEY,
  kind          TEXT NOT NULL
                CHECK (kind IN ('fact', 'preference', 'person', 'episode', 'insight')),
  subject       TEXT NOT NULL,               -- "chris", "climbing", "mom" ('' = none)
  content       TEXT NOT NULL,               -- one atomic statement
  source        TEXT NOT NULL,               -- chat | consolidation | operator | import
  confidence    REAL NOT NULL DEFAULT 1.0,
  created_at    TEXT NOT NULL,
  updated_at    TEXT NOT NULL,
  expires_at    TEXT,                        -- per-kind TTL: episodes decay, facts do not
  superseded_by INTEGER REFERENCES memory (id) ON DELETE SET NULL,  -- consolidation link
  consolidation TEXT                         -- episodes: NULL pending | done | quarantined
                CHECK (consolidation IN ('done', 'quarantined')),
  attempts      INTEGER NOT NULL DEFAULT 0   -- failed consolidation passes over this row
);
-- Durable rows newest first (hydration), exact-duplicate lookup, pending episodes.
CREATE INDEX memory_durable ON memory (updated_at)
  WHERE superseded_by IS NULL AND kind IN ('fact', 'preference', 'person');
CREATE INDEX memory_exact ON memory (content, kind);
CREATE INDEX memory_pending ON memory (id)
  WHERE kind = 'episode' AND consolidation IS NULL;
CREATE INDEX memory_superseded ON memory (superseded_by) WHERE superseded_by IS NOT NULL;

-- Full-text index over subject + content, an external-content table kept in sync by triggers.
CREATE VIRTUAL TABLE memory_fts USING fts5 (
  subject, content, content = 'memory', content_rowid = 'id',
  tokenize = 'unicode61 remove_diacritics 2'
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

-- Contradictions with the persona found by consolidation: shown to the human, never obeyed.
CREATE TABLE memory_flag (
  id           INTEGER PRIMARY KEY,
  statement    TEXT NOT NULL,               -- what memory suggested
  persona_says TEXT NOT NULL,               -- what the persona files say instead
  source_ids   TEXT NOT NULL DEFAULT '[]',  -- JSON array of the memory rows it came from
  created_at   TEXT NOT NULL,
  resolved_at  TEXT
);

-- Consolidation batches whose model output stayed invalid after every retry.
CREATE TABLE memory_quarantine (
  id         INTEGER PRIMARY KEY,
  memory_ids TEXT NOT NULL,                 -- JSON array of the episode rows in the batch
  error      TEXT NOT NULL,
  output     TEXT NOT NULL,                 -- the last model output (capped)
  created_at TEXT NOT NULL
);

-- Small consolidation bookkeeping (e.g. the newest session summary already read).
CREATE TABLE memory_state (
  key   TEXT PRIMARY KEY,
  value TEXT NOT NULL
);
