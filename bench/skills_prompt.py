"""The prompt-size cost of skills: what 20 skills add to every request, as an estimate.

Prints figures; never pass/fail. Twenty skill folders with descriptions of ordinary length
(one or two sentences, as the agentskills specification asks: what the skill does and when
to use it) and bodies of a few hundred words are written to a temporary PERSONA_DIR/skills,
loaded the way `gantry run` loads them (gantry.skills.catalog), and measured:

  listing     the block the system prompt carries (names and descriptions only)
  skill_read  the tool's definition, sent with every request that offers tools
  bodies      what the same skills would cost if their instructions sat in the prompt
  one load    what one `skill_read` (or `/<skill>`) adds to that turn only

Tokens are gantry's estimate (gantry.session.est_tokens: characters / 4), not a tokenizer's
count; a model's own tokenizer gives other figures.

Usage: python bench/skills_prompt.py [--skills 20] [--body-words 300]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from gantry.session import est_tokens
from gantry.skills.catalog import BLOCK_MAX_CHARS, HEADER, MAX_LISTED, Skills
from gantry.skills.tool import loaded_text, read_tool
from gantry.tools import Registry

TOPICS = [
    ("plan-week", "Plan the user's coming week from their calendar and open tasks; use when "
     "they ask what their week looks like or want it organised."),
    ("file-expense", "File an expense claim: collect amount, date, category and receipt, "
     "check them against the policy, then submit. Use for receipts and reimbursements."),
    ("weekly-review", "Run a short weekly review: what got done, what slipped, what comes "
     "next. Use on Fridays or when the user asks to look back on the week."),
    ("trip-packing", "Build a packing list for a trip from its length, weather and purpose; "
     "use when the user mentions travelling somewhere."),
    ("meeting-notes", "Turn a rough meeting transcript into notes with decisions, owners and "
     "deadlines. Use when the user pastes or dictates a meeting."),
    ("email-triage", "Sort an inbox summary into reply now, delegate, later and archive; use "
     "when the user asks for help with their email backlog."),
    ("recipe-scale", "Scale a recipe to a different number of servings and convert units; "
     "use when the user shares a recipe and a head count."),
    ("budget-month", "Draft a monthly budget from income and fixed costs and flag where the "
     "money goes. Use when the user talks about saving or spending."),
    ("gift-ideas", "Suggest gift ideas from what the user says about the person, the "
     "occasion and a price range; use before birthdays and holidays."),
    ("workout-plan", "Put together a week of workouts for the user's goal, equipment and "
     "time; use when they ask for a training plan."),
    ("bug-report", "Write a clear bug report: steps to reproduce, expected and actual "
     "behaviour, environment. Use when the user describes something broken."),
    ("job-apply", "Tailor a cover letter and CV bullet points to a job posting; use when the "
     "user shares a posting they want to apply for."),
    ("study-cards", "Make question-and-answer flash cards from notes or a chapter; use when "
     "the user is studying for a test."),
    ("home-repair", "Walk through diagnosing a household repair (leaks, sockets, doors) "
     "safely and say when to call a professional."),
    ("read-contract", "Summarise a contract's obligations, dates, fees and exit clauses in "
     "plain words; use when the user shares an agreement. Not legal advice."),
    ("garden-care", "Advise on watering, feeding and pruning the user's plants by season and "
     "climate; use for questions about a garden or house plants."),
    ("time-zones", "Find a meeting time that works across several time zones; use when the "
     "user schedules with people in other countries."),
    ("doc-outline", "Outline a document (report, proposal, talk) from its goal and audience "
     "before writing it; use when the user starts a longer piece."),
    ("habit-check", "Check in on the habits the user is building and suggest one small next "
     "step; use when they report progress or a lapse."),
    ("mcp-github", "Use the GitHub MCP server well: search issues before filing, link pull "
     "requests, keep labels consistent. Use for any GitHub task."),
]

FILLER = ("first ask the user for what is missing then check each item against the list and "
          "write the result as short numbered steps with one line per step")
WORDS = FILLER.split()


def write(root: Path, count: int, body_words: int) -> Path:
    skills = root / "skills"
    for i in range(count):
        name, description = TOPICS[i % len(TOPICS)]
        name = name if i < len(TOPICS) else f"{name}-{i}"
        d = skills / name
        (d / "references").mkdir(parents=True)
        body = " ".join(WORDS[j % len(WORDS)] for j in range(body_words))
        (d / "SKILL.md").write_text(f"---\nname: {name}\ndescription: {description}\n---\n"
                                    f"# {name}\n\n{body}\n", encoding="utf-8")
        (d / "references" / "details.md").write_text("More detail.\n", encoding="utf-8")
    return skills


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--skills", type=int, default=20)
    ap.add_argument("--body-words", type=int, default=300)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        directory = write(Path(tmp), args.skills, args.body_words)
        loads = []
        for _ in range(20):
            skills = Skills(directory)
            started = time.perf_counter()
            skills.load()
            loads.append((time.perf_counter() - started) * 1000)
        listing = skills.block()
        tool = read_tool(skills, Registry(), None)
        catalog = skills.catalog.skills
        bodies = sum(len(s.body) for s in catalog)
        one = loaded_text(catalog[0], directory / catalog[0].name)
        descriptions = [len(s.description) for s in catalog]
    print(f"skills: {len(catalog)}, descriptions {min(descriptions)}–{max(descriptions)} chars "
          f"(median {statistics.median(descriptions):.0f}), bodies {args.body_words} words")
    print("tokens are ESTIMATES (gantry's chars/4), not a tokenizer's count")
    print(f"  listing in the system prompt  {len(listing):>6} chars  ~{est_tokens(len(listing)):>5}"
          f" tokens est., every request (header ~{est_tokens(len(HEADER))}, then "
          f"~{est_tokens(len(listing) - len(HEADER)) / len(catalog):.0f} per skill)")
    print(f"  skill_read definition         {'':>6}        ~{tool.tokens():>5} tokens est."
          "  every request offering tools")
    print(f"  the bodies, if in the prompt  {bodies:>6} chars  ~{est_tokens(bodies):>5} tokens est."
          "  (what the listing saves per request)")
    print(f"  one skill loaded (its turn)   {len(one):>6} chars  ~{est_tokens(len(one)):>5} tokens "
          "est.  that turn only")
    print(f"caps: at most {MAX_LISTED} skills and {BLOCK_MAX_CHARS} chars "
          f"(~{est_tokens(BLOCK_MAX_CHARS)} tokens est.) listed")
    print(f"load of the folder (boot, SIGHUP): median {statistics.median(loads):.2f} ms "
          f"over {len(loads)} loads")


if __name__ == "__main__":
    main()
