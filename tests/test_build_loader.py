"""build/gantry_loader.c: the indexed findEntry answers exactly as Nuitka's linear scan.

The C file is compiled against a stand-in loader table (the fields findEntry reads, Nuitka's
name comparison as a reference) and asked the same questions as the scan it replaces:
duplicate names, INTERNAL entries looked up from outside, misses, names the index cannot hold.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[1]
INTERNAL = 16
MAX_LEN = 24  # the stand-in's NUITKA_LOADER_NAME_MAX_LEN: small, so too-long names occur

HARNESS = r"""
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NUITKA_LOADER_NAME_MAX_LEN @MAX@
#define NUITKA_INTERNAL_MODULE_FLAG 16

struct Nuitka_MetaPathBasedLoaderEntry {
    char const *m_name;
    void (*m_get_name)(char *buffer, size_t buffer_size, char const *name);
    bool (*m_compare_name)(char const *name, char const *m_name);
    int flags;
};

static struct Nuitka_MetaPathBasedLoaderEntry **loader_entries = NULL;
static int loader_entry_count = 0;

/* Run-time names as Nuitka's hooks make them: here, "pkg" entries stand for "gantry.pkg". */
static void prefixed_name(char *buffer, size_t buffer_size, char const *name) {
    snprintf(buffer, buffer_size, "gantry.%s", name);
}
static bool any_case_name(char const *name, char const *m_name) {
    return strcasecmp(name, m_name) == 0;
}

/* Nuitka's comparison (compareToEntryName), including its abort on an over-long name. */
static bool compareToEntryName(char const *name,
                               struct Nuitka_MetaPathBasedLoaderEntry const *entry) {
    if (entry->m_compare_name != NULL) {
        return entry->m_compare_name(name, entry->m_name);
    }
    char buffer[NUITKA_LOADER_NAME_MAX_LEN];
    if (entry->m_get_name != NULL) {
        entry->m_get_name(buffer, sizeof(buffer), entry->m_name);
    } else {
        if (strlen(entry->m_name) >= sizeof(buffer)) {
            abort();
        }
        strcpy(buffer, entry->m_name);
    }
    return strcmp(name, buffer) == 0;
}

#include "gantry_loader.c"

static int linear(char const *name, bool internal) {
    for (int i = 0; i < loader_entry_count; i++) {
        if (compareToEntryName(name, loader_entries[i])) {
            if (!internal && (loader_entries[i]->flags & NUITKA_INTERNAL_MODULE_FLAG)) {
                continue;
            }
            return i;
        }
    }
    return -1;
}

static int position(struct Nuitka_MetaPathBasedLoaderEntry const *entry) {
    for (int i = 0; entry != NULL && i < loader_entry_count; i++) {
        if (loader_entries[i] == entry) {
            return i;
        }
    }
    return -1;
}

/* stdin: "T <count>" then <count> lines "<flags> <kind> <name>" (a new table, kind 0 plain,
   1 m_get_name, 2 m_compare_name); "Q <internal> <name>" asks both. Out: per query
   "<indexed> <linear> <index in use>". */
int main(void) {
    char command[2];
    char name[256];
    while (scanf("%1s", command) == 1) {
        if (command[0] == 'T') {
            int count;
            if (scanf("%d", &count) != 1) {
                return 2;
            }
            struct Nuitka_MetaPathBasedLoaderEntry **table = calloc(count + 1, sizeof(*table));
            for (int i = 0; i < count; i++) {
                int flags, kind;
                if (scanf("%d %d %255s", &flags, &kind, name) != 3) {
                    return 2;
                }
                table[i] = calloc(1, sizeof(**table));
                table[i]->m_name = strdup(name);
                table[i]->flags = flags;
                table[i]->m_get_name = kind == 1 ? prefixed_name : NULL;
                table[i]->m_compare_name = kind == 2 ? any_case_name : NULL;
            }
            loader_entries = table;
            loader_entry_count = count;
        } else {
            int internal;
            if (scanf("%d %255s", &internal, name) != 2) {
                return 2;
            }
            int fast = position(findEntry(name, internal != 0));
            printf("%d %d %d\n", fast, linear(name, internal != 0), gantry_slots != NULL);
        }
    }
    return 0;
}
""".replace("@MAX@", str(MAX_LEN))


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc (the build needs it too)")
    work = tmp_path_factory.mktemp("loader")
    shutil.copy(ROOT / "build" / "gantry_loader.c", work / "gantry_loader.c")
    (work / "harness.c").write_text(HARNESS)
    exe = work / "harness"
    subprocess.run(["gcc", "-O1", "-Wall", "-Werror", "-fsanitize=address,undefined",
                    "-o", str(exe), str(work / "harness.c")], check=True)
    return exe


Entry = tuple[int, int, str]  # flags, kind, name


def ask(exe: Path, tables: list[tuple[list[Entry], list[tuple[bool, str]]]]) -> list[list[int]]:
    """Run the questions; each answer is [indexed, linear, index in use]."""
    lines: list[str] = []
    for entries, queries in tables:
        lines.append(f"T {len(entries)}")
        lines += [f"{flags} {kind} {name}" for flags, kind, name in entries]
        lines += [f"Q {int(internal)} {name}" for internal, name in queries]
    out = subprocess.run([str(exe)], input="\n".join(lines) + "\n", capture_output=True,
                         text=True, check=True, env={"ASAN_OPTIONS": "detect_leaks=0"}).stdout
    return [[int(x) for x in line.split()] for line in out.splitlines()]


def test_a_real_sized_table_is_indexed_and_answers_as_the_scan(harness: Path) -> None:
    names = [f"pkg{i // 40}.mod{i % 40}" for i in range(1700)]
    entries = [(INTERNAL if i % 97 == 0 else 0, 0, name) for i, name in enumerate(names)]
    entries.append((0, 0, names[0]))  # the INTERNAL first one has a public namesake later
    queries = [(internal, name) for name in [*names, "pkg0", "nope", "pkg99.mod1"]
               for internal in (False, True)]
    answers = ask(harness, [(entries, queries)])
    assert all(fast == slow for fast, slow, _ in answers)
    assert all(used for _, _, used in answers)
    assert answers[0][:2] == [1700, 1700]  # public lookup skips the INTERNAL entry 0
    assert answers[1][:2] == [0, 0]


def test_computed_or_overlong_names_fall_back_to_the_scan(harness: Path) -> None:
    plain = [(0, 0, "a"), (0, 0, "b")]
    cases = [
        ([*plain, (0, 1, "tools")], [(False, "gantry.tools"), (False, "tools"), (False, "a")]),
        ([*plain, (0, 2, "Mixed")], [(False, "mixed"), (False, "b")]),
        # (the scan abort()s on reaching an over-long name, as Nuitka's does: ask before it)
        ([*plain, (0, 0, "x" * (MAX_LEN + 5))], [(False, "a"), (True, "b")]),
        (plain, [(False, "a"), (True, "b"), (False, "c")]),  # a new table is indexed again
    ]
    answers = ask(harness, cases)
    assert all(fast == slow for fast, slow, _ in answers)
    assert [used for _, _, used in answers] == [0, 0, 0, 0, 0, 0, 0, 1, 1, 1]
    assert answers[0][:2] == [2, 2] and answers[3][:2] == [2, 2]


NAMES = st.text(alphabet="ab.c", min_size=1, max_size=4)
ENTRIES = st.lists(st.tuples(st.sampled_from([0, INTERNAL, 1, INTERNAL | 1]),
                             st.sampled_from([0] * 8 + [1, 2]), NAMES), max_size=40)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(ENTRIES, st.lists(st.tuples(st.booleans(), NAMES), max_size=30)),
                min_size=1, max_size=3))
def test_any_table_any_question_same_answer(
    harness: Path, tables: list[tuple[list[Entry], list[tuple[bool, str]]]]
) -> None:
    for fast, slow, _ in ask(harness, tables):
        assert fast == slow
