/* gantry's findEntry for Nuitka's module loader (MetaPathBasedLoader.c, Nuitka 4.3.3).
 *
 * build/static_onefile.py puts this text in place of the stock findEntry, which answers every
 * import (and every miss, e.g. each `import x` tried before a package's own finder) by walking
 * all ~1,700 loader entries, copying each name into a buffer and comparing it: 7% of a
 * `gantry status`, and more of `gantry run`'s thousands of imports. Here the first lookup
 * builds an open-addressing index from name to the first entry of that name, and a lookup
 * costs one hash and usually one strcmp. The answer is exactly the linear scan's:
 *
 * - an INTERNAL entry found for a non-internal lookup goes on with the scan after it, as the
 *   stock loop's `continue` does;
 * - entries whose name is computed (m_get_name) or compared (m_compare_name) at run time, or
 *   too long for the stock buffer (which abort()s), cannot be indexed: then the stock scan runs;
 * - the index is rebuilt if the registered table changes, and not used if it cannot be made.
 *
 * tests/test_build_loader.py compiles this file against a stand-in table and holds every
 * answer to the linear scan's.
 */

static struct Nuitka_MetaPathBasedLoaderEntry **gantry_indexed_entries = NULL;
static int gantry_indexed_count = -1;
static int *gantry_slots = NULL; /* entry index + 1, or 0 for an empty slot */
static size_t gantry_slot_mask = 0;

static size_t gantry_name_hash(char const *name) {
    uint32_t hash = 2166136261u; /* FNV-1a */
    for (unsigned char const *c = (unsigned char const *)name; *c != 0; c++) {
        hash = (hash ^ *c) * 16777619u;
    }
    return (size_t)hash;
}

static bool gantry_entry_indexable(struct Nuitka_MetaPathBasedLoaderEntry const *entry) {
    return entry->m_get_name == NULL && entry->m_compare_name == NULL &&
           strlen(entry->m_name) < NUITKA_LOADER_NAME_MAX_LEN;
}

/* Build the index for the current table; false (index off) if any entry cannot be indexed
   or memory is short. */
static bool gantry_build_index(void) {
    free(gantry_slots);
    gantry_slots = NULL;
    gantry_indexed_entries = loader_entries;
    gantry_indexed_count = loader_entry_count;

    for (int i = 0; i < loader_entry_count; i++) {
        if (!gantry_entry_indexable(loader_entries[i])) {
            return false;
        }
    }
    size_t slots = 16;
    while (slots < 2 * (size_t)loader_entry_count) {
        slots *= 2;
    }
    int *table = (int *)calloc(slots, sizeof(int));
    if (table == NULL) {
        return false;
    }
    for (int i = 0; i < loader_entry_count; i++) {
        char const *name = loader_entries[i]->m_name;
        size_t slot = gantry_name_hash(name) & (slots - 1);
        while (table[slot] != 0 && strcmp(loader_entries[table[slot] - 1]->m_name, name) != 0) {
            slot = (slot + 1) & (slots - 1);
        }
        if (table[slot] == 0) {
            table[slot] = i + 1; /* a later entry of the same name stays reachable by the scan */
        }
    }
    gantry_slots = table;
    gantry_slot_mask = slots - 1;
    return true;
}

static struct Nuitka_MetaPathBasedLoaderEntry *findEntry(char const *name, bool internal) {
    int start = 0;

    if (gantry_indexed_entries != loader_entries || gantry_indexed_count != loader_entry_count) {
        gantry_build_index();
    }
    if (gantry_slots != NULL) {
        size_t slot = gantry_name_hash(name) & gantry_slot_mask;
        for (;;) {
            int found = gantry_slots[slot];
            if (found == 0) {
                return NULL;
            }
            struct Nuitka_MetaPathBasedLoaderEntry *entry = loader_entries[found - 1];
            if (strcmp(entry->m_name, name) == 0) {
                if (internal || (entry->flags & NUITKA_INTERNAL_MODULE_FLAG) == 0) {
                    return entry;
                }
                start = found; /* the stock scan would `continue` past it */
                break;
            }
            slot = (slot + 1) & gantry_slot_mask;
        }
    }

    for (int i = start; i < loader_entry_count; i++) {
        if (compareToEntryName(name, loader_entries[i])) {
            if (!internal && (loader_entries[i]->flags & NUITKA_INTERNAL_MODULE_FLAG)) {
                continue;
            }

            return loader_entries[i];
        }
    }

    return NULL;
}
