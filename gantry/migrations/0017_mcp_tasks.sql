-- MCP tasks (docs/mcp.md, "Long operations: tasks"): a tool call made as a task, keyed by
-- the recorded tool call it answers. Written before the call is sent (state 'sending'), then
-- with the server's task id the moment it is known (one row, one transaction each), so a
-- kill -9 at any point re-runs nothing: a restart polls the same task, and a call whose task
-- id never arrived is not sent again. Times are unix seconds, UTC.
CREATE TABLE mcp_task (
  session_id  TEXT    NOT NULL,          -- the conversation ("<channel>:<chat>")
  call_id     TEXT    NOT NULL,          -- the model's tool call id in that conversation
  server      TEXT    NOT NULL,          -- MCP server (manifest name)
  tool        TEXT    NOT NULL,          -- MCP tool name
  task_id     TEXT,                      -- the server's task id; NULL until it answered
  state       TEXT    NOT NULL,          -- sending | running | detached | delivering | delivered | done | lost
  result      TEXT,                      -- CallToolResult JSON: what the model was told
  push        TEXT,                      -- a detached task's message to the chat, once over
  sent_parts  INTEGER NOT NULL DEFAULT 0, -- parts of `push` out (never sent twice)
  error       INTEGER NOT NULL DEFAULT 0,
  created_at  REAL    NOT NULL,
  updated_at  REAL    NOT NULL,
  PRIMARY KEY (session_id, call_id)
);
CREATE INDEX mcp_task_detached ON mcp_task (state) WHERE state IN ('detached', 'delivering');
