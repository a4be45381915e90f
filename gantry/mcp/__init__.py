"""MCP: the host (the manifest, supervised stdio servers, their tools in the registry) and
tool routing for big catalogs.

Importing this package is free: `mcp` (the SDK, ~0.7 s and tens of MB) is imported only by
the host's modules (host.py and the server parts it composes) and the transports, and only
when the manifest lists servers.
"""
