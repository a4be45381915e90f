-- OAuth for remote MCP servers (docs/mcp.md, "OAuth"): one row per manifest server with
-- `auth = "oauth"`, written by `gantry mcp login NAME` and by the daemon when it refreshes.
-- url: the server URL the login was for (a changed manifest URL needs a new login).
-- client_info, tokens: the SDK's OAuthClientInformationFull and OAuthToken as JSON;
-- expires_at: when the access token expires (unix seconds; NULL = the server gave no expiry),
-- kept apart because the token's expires_in is relative to when it was issued.
-- as_metadata, resource_metadata: what discovery found at login (the token endpoint that a
-- refresh posts to, the resource the tokens are for), so the daemon refreshes without it.
-- login_required: why the stored tokens no longer work (a refresh was refused); NULL = fine.
CREATE TABLE mcp_oauth (
  server TEXT PRIMARY KEY,
  url TEXT NOT NULL,
  client_info TEXT,
  tokens TEXT,
  expires_at REAL,
  as_metadata TEXT,
  resource_metadata TEXT,
  login_required TEXT,
  updated_at REAL NOT NULL
) STRICT;
