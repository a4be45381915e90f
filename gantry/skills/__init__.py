"""Skills: agentskills folders (`PERSONA_DIR/skills/<name>/SKILL.md`) the model reads on demand.

The system prompt lists each skill by name and description; the `skill_read` tool gives the
body or a bundled file; `/skills` and `/<skill-name>` are the user's side (docs/skills.md).
"""
