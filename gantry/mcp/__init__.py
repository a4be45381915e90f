"""MCP: the stdio host (supervised children, tools in the registry) and tool routing."""
