/* gantry's additions to Nuitka's onefile bootstrap (OnefileBootstrap.c, Nuitka 4.3.3).
 *
 * build/static_onefile.py inserts this file after the bootstrap's includes and routes a few
 * calls of the stock code through it (each by a needle that must match exactly once). Why and
 * what is checked: docs/packaging.md, "Where gantry unpacks and why it is safe".
 *
 * - The fixed extraction dir is opened without following links and used only if the opened
 *   directory belongs to us (or root) and is not writable by group or others. A first start
 *   unpacks into a private mkdtemp() dir next to it and renames that into place when complete,
 *   so no start ever sees, or executes, a half-written or someone else's payload.
 * - Every way the unpack or the exec can fail on a bad /tmp (read-only, full, noexec, not
 *   writable) ends in one line saying what is wrong and how to fix it, exit 1, and removes
 *   whatever this start had created.
 * - SIGHUP, SIGUSR1 and SIGUSR2 are forwarded to the unpacked program (persona reload).
 * - `status` and `version` exec the program in place of the bootstrap (no fork, no wait).
 *
 * GANTRY_PAYLOAD_BYTES, GANTRY_PAYLOAD_FILES and GANTRY_DOC are defined by the plugin right above this text.
 */

#include <fcntl.h>
#include <ftw.h>
#include <stdarg.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/statvfs.h>

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0)
#endif

#define GANTRY_PATH_MAX 4096

static char gantry_final[GANTRY_PATH_MAX];   /* the fixed extraction dir */
static char gantry_parent[GANTRY_PATH_MAX];  /* where it lives (normally /tmp) */
static char gantry_stage[GANTRY_PATH_MAX];   /* private staging dir during a first start */
static char gantry_pending[GANTRY_PATH_MAX]; /* temp file of a repair in progress (relative) */
static int gantry_dirfd = -1;                /* the verified extraction dir */
static int gantry_lockfd = -1;               /* the parent dir, flock'ed while a first start unpacks */
static mode_t gantry_old_umask = 0;

static int gantry_rm_entry(char const *path, struct stat const *st, int flag, struct FTW *ftw) {
    (void)st;
    (void)ftw;
    if (flag == FTW_DP || flag == FTW_D) {
        rmdir(path);
    } else {
        unlink(path);
    }
    return 0;
}

/* Remove a tree we created; never follows symbolic links or crosses mounts. */
static void gantry_rmtree(char const *path) { nftw(path, gantry_rm_entry, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT); }

static void gantry_cleanup(void) {
    if (gantry_stage[0] != 0) {
        gantry_rmtree(gantry_stage);
        gantry_stage[0] = 0;
    }
    if (gantry_pending[0] != 0 && gantry_dirfd >= 0) {
        unlinkat(gantry_dirfd, gantry_pending, 0);
        gantry_pending[0] = 0;
    }
}

/* One line on stderr, clean up what this start created, exit 1 (2 is for usage errors). */
static void gantry_die(char const *fmt, ...) {
    gantry_cleanup();
    va_list ap;
    va_start(ap, fmt);
    fputs("gantry: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs("\n", stderr);
    va_end(ap);
    exit(1);
}

static unsigned long long gantry_mb(unsigned long long bytes) { return (bytes + 999999ULL) / 1000000ULL; }

/* Why writing below the parent failed, and what to do about it. */
static void gantry_die_errno(int error, char const *doing) {
    if (error == EROFS) {
        gantry_die("%s is read-only, but gantry unpacks itself there (%llu MB, once per version) before it can "
                   "run; mount a writable, exec-allowed tmpfs at %s (compose: tmpfs: %s:rw,exec,size=256m), %s",
                   gantry_parent, gantry_mb(GANTRY_PAYLOAD_BYTES), gantry_parent, gantry_parent, GANTRY_DOC);
    }
    if (error == ENOSPC || error == EDQUOT) {
        struct statvfs sv;
        bool no_inodes = statvfs(gantry_parent, &sv) == 0 && sv.f_files > 0 && sv.f_favail == 0;
        gantry_cleanup();
        if (no_inodes) {
            gantry_die("%s has no free inodes left: gantry unpacks %d files there (%llu MB) before it can run; "
                       "give it more (tmpfs nr_inodes, or drop the limit), %s",
                       gantry_parent, GANTRY_PAYLOAD_FILES, gantry_mb(GANTRY_PAYLOAD_BYTES), GANTRY_DOC);
        }
        unsigned long long avail = 0;
        if (statvfs(gantry_parent, &sv) == 0) {
            avail = (unsigned long long)sv.f_bavail * sv.f_frsize;
        }
        gantry_die("%s is too small: gantry needs %llu MB free there to unpack itself once per version, %llu MB "
                   "are free; give it more space (compose: tmpfs: %s:rw,exec,size=256m), %s",
                   gantry_parent, gantry_mb(GANTRY_PAYLOAD_BYTES), avail / 1000000ULL, gantry_parent, GANTRY_DOC);
    }
    if (error == EACCES || error == EPERM) {
        gantry_die("%s is not writable for uid %u, but gantry unpacks itself there before it can run; make it "
                   "writable (mode 1777, or a tmpfs: compose: tmpfs: %s:rw,exec), %s",
                   gantry_parent, (unsigned)geteuid(), gantry_parent, GANTRY_DOC);
    }
    gantry_die("cannot %s %s: %s; %s", doing, gantry_final, strerror(error), GANTRY_DOC);
}

/* Use an existing extraction dir only if its opened inode is ours (or root's) and nobody else
   can write to it: then nobody else can have put, or can put, a file into it. */
static void gantry_verify(int fd) {
    struct stat st;
    if (fstat(fd, &st) != 0) {
        gantry_die_errno(errno, "check");
    }
    uid_t me = geteuid();
    if (st.st_uid != me && st.st_uid != 0) {
        gantry_die("refusing to run from %s: it belongs to uid %u, not to you (uid %u) or root, so someone else "
                   "may have put files there; remove it (as root: rm -rf %s) and start gantry again, %s",
                   gantry_final, (unsigned)st.st_uid, (unsigned)me, gantry_final, GANTRY_DOC);
    }
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
        gantry_die("refusing to run from %s: it is writable by group or others (mode %04o), so someone else "
                   "may have put files there; remove it (rm -rf %s) and start gantry again, %s",
                   gantry_final, (unsigned)(st.st_mode & 07777), gantry_final, GANTRY_DOC);
    }
    gantry_dirfd = fd;
}

/* The extraction dir exists but is not a plain directory we may open. */
static void gantry_die_unusable(int error) {
    struct stat st;
    bool have = lstat(gantry_final, &st) == 0;
    if (error == ELOOP || (have && S_ISLNK(st.st_mode))) {
        gantry_die("refusing to use %s: it is a symbolic link (gantry never follows one there); remove it "
                   "(as root if it is not yours: rm -f %s) and start gantry again, %s",
                   gantry_final, gantry_final, GANTRY_DOC);
    }
    if (error == ENOTDIR) {
        gantry_die("refusing to use %s: it is not a directory; remove it (as root if it is not yours: rm -f %s) "
                   "and start gantry again, %s",
                   gantry_final, gantry_final, GANTRY_DOC);
    }
    if (error == EACCES && have) {
        gantry_die("cannot open %s (uid %u, mode %04o) as uid %u; remove it (as root: rm -rf %s) and start "
                   "gantry again, %s",
                   gantry_final, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777), (unsigned)geteuid(),
                   gantry_final, GANTRY_DOC);
    }
    gantry_die_errno(error, "open");
}

/* Staging dirs of first starts that were killed (name: <dir>.unpack-<pid>-XXXXXX, ours, pid gone). */
static void gantry_sweep_stale(void) {
    char const *base = strrchr(gantry_final, '/') + 1;
    char prefix[GANTRY_PATH_MAX];
    snprintf(prefix, sizeof(prefix), "%s.unpack-", base);
    size_t prefix_len = strlen(prefix);

    DIR *d = opendir(gantry_parent);
    if (d == NULL) {
        return;
    }
    struct dirent *entry;
    while ((entry = readdir(d)) != NULL) {
        if (strncmp(entry->d_name, prefix, prefix_len) != 0) {
            continue;
        }
        long pid = strtol(entry->d_name + prefix_len, NULL, 10);
        if (pid <= 0 || kill((pid_t)pid, 0) == 0 || errno != ESRCH) {
            continue; /* still running (or not ours to judge) */
        }
        struct stat st;
        if (fstatat(dirfd(d), entry->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode) ||
            st.st_uid != geteuid()) {
            continue;
        }
        char path[GANTRY_PATH_MAX];
        snprintf(path, sizeof(path), "%s/%s", gantry_parent, entry->d_name);
        gantry_rmtree(path);
    }
    closedir(d);
}

/* Before Nuitka's unpack loop: open and verify the extraction dir, or (first start) create a
   private staging dir and let the loop write there. */
static void gantry_prepare(filename_char_t *payload_path) {
    snprintf(gantry_final, sizeof(gantry_final), "%s", payload_path);
    snprintf(gantry_parent, sizeof(gantry_parent), "%s", payload_path);
    char *slash = strrchr(gantry_parent, '/');
    if (slash == gantry_parent) {
        slash[1] = 0;
    } else if (slash != NULL) {
        *slash = 0;
    }

    int fd = open(gantry_final, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) {
        /* First start of this version. Unpack one at a time (a healthcheck racing `run`, ten
           starts at once on a small tmpfs): the others wait, then find the finished copy. The
           lock is a flock on the parent directory itself, so there is no lock file to plant or
           to leave behind; if somebody holds it for a minute, we go on without it (two first
           starts then both unpack privately and one rename wins). */
        gantry_lockfd = open(gantry_parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        for (int i = 0; gantry_lockfd >= 0 && i < 6000; i++) {
            if (flock(gantry_lockfd, LOCK_EX | LOCK_NB) == 0 || errno != EWOULDBLOCK) {
                break;
            }
            usleep(10000);
        }
        fd = open(gantry_final, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    }
    if (fd >= 0) {
        if (gantry_lockfd >= 0) {
            close(gantry_lockfd);
            gantry_lockfd = -1;
        }
        gantry_verify(fd);
        return;
    }
    if (errno != ENOENT) {
        gantry_die_unusable(errno);
    }

    gantry_sweep_stale();
    struct statvfs sv;
    if (statvfs(gantry_parent, &sv) == 0) {
        if ((sv.f_flag & ST_RDONLY) != 0) {
            gantry_die_errno(EROFS, "create");
        }
        if ((unsigned long long)sv.f_bavail * sv.f_frsize < GANTRY_PAYLOAD_BYTES) {
            gantry_die_errno(ENOSPC, "create");
        }
    }
    snprintf(gantry_stage, sizeof(gantry_stage), "%s.unpack-%ld-XXXXXX", gantry_final, (long)getpid());
    if (mkdtemp(gantry_stage) == NULL) {
        int error = errno;
        gantry_stage[0] = 0;
        gantry_die_errno(error, "create");
    }
    /* Readable by all (a root-owned copy serves every user), whatever the caller's umask. */
    gantry_old_umask = umask(022);
    payload_path[0] = 0;
    appendStringSafeFilename(payload_path, gantry_stage, GANTRY_PATH_MAX);
}

/* In place of Nuitka's CRC32 of the existing file: in a verified cached dir, a file of the
   right size is trusted (the dir is ours and appears only complete); a first start writes all. */
static bool gantry_is_current(filename_char_t const *target_path, unsigned long long size) {
    if (gantry_stage[0] != 0 || gantry_dirfd < 0) {
        return false;
    }
    struct stat st;
    char const *rel = target_path + strlen(gantry_final) + 1;
    return fstatat(gantry_dirfd, rel, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
           (unsigned long long)st.st_size == size;
}

/* Open a payload file for writing: directly in the staging dir, or (repairing a damaged file in
   the cached dir) as a temp file renamed over it once complete. */
static FILE *gantry_create(filename_char_t const *target_path) {
    int fd;
    if (gantry_stage[0] != 0) {
        fd = open(target_path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    } else {
        char const *rel = target_path + strlen(gantry_final) + 1;
        snprintf(gantry_pending, sizeof(gantry_pending), "%s.repair-%ld", rel, (long)getpid());
        unlinkat(gantry_dirfd, gantry_pending, 0);
        fd = openat(gantry_dirfd, gantry_pending, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd >= 0) {
            fchmod(fd, 0644);
        }
    }
    if (fd < 0) {
        int error = errno;
        if (gantry_stage[0] == 0) {
            gantry_pending[0] = 0;
            if (error == EACCES || error == EPERM) {
                gantry_die("%s is damaged (%s has the wrong size) and uid %u cannot repair it; remove it (as "
                           "its owner or root: rm -rf %s) and start gantry again, %s",
                           gantry_final, target_path, (unsigned)geteuid(), gantry_final, GANTRY_DOC);
            }
        }
        gantry_die_errno(error, "write to");
    }
    FILE *result = fdopen(fd, "wb");
    if (result == NULL) {
        gantry_die_errno(errno, "write to");
    }
    return result;
}

static void gantry_close(FILE *file, filename_char_t const *target_path) {
    if (fclose(file) != 0) {
        gantry_die_errno(errno, "write to");
    }
    if (gantry_pending[0] != 0) {
        char const *rel = target_path + strlen(gantry_final) + 1;
        if (renameat(gantry_dirfd, gantry_pending, gantry_dirfd, rel) != 0) {
            gantry_die_errno(errno, "write to");
        }
        gantry_pending[0] = 0;
    }
}

/* A payload symlink: recreate it only when it differs (a cached start then writes nothing, so
   it also works on a read-only /tmp), via a temp link renamed over the old one. */
static void gantry_symlink(filename_char_t const *link_target, filename_char_t const *target_path) {
    if (gantry_stage[0] != 0) {
        if (symlink(link_target, target_path) != 0) {
            gantry_die_errno(errno, "write to");
        }
        return;
    }
    char const *rel = target_path + strlen(gantry_final) + 1;
    char existing[GANTRY_PATH_MAX];
    ssize_t n = readlinkat(gantry_dirfd, rel, existing, sizeof(existing) - 1);
    if (n >= 0) {
        existing[n] = 0;
        if (strcmp(existing, link_target) == 0) {
            return;
        }
    }
    snprintf(gantry_pending, sizeof(gantry_pending), "%s.repair-%ld", rel, (long)getpid());
    unlinkat(gantry_dirfd, gantry_pending, 0);
    if (symlinkat(link_target, gantry_dirfd, gantry_pending) != 0 ||
        renameat(gantry_dirfd, gantry_pending, gantry_dirfd, rel) != 0) {
        gantry_die_errno(errno, "write to");
    }
    gantry_pending[0] = 0;
}

/* The payload is linked into this executable, so the pages the unpack loop read (every file
   header, on a cached start) stay in the bootstrap's resident set for the program's whole
   life, though it never reads them again. They are clean file pages: dropping them from this
   process now is what the kernel would do under memory pressure anyway. Best effort. */
static void gantry_release_payload(unsigned char const *data, unsigned long long size) {
    long page = sysconf(_SC_PAGESIZE);
    if (data == NULL || size == 0 || page <= 0) {
        return;
    }
    uintptr_t mask = (uintptr_t)page - 1;
    uintptr_t start = ((uintptr_t)data + mask) & ~mask;
    uintptr_t end = ((uintptr_t)data + (uintptr_t)size) & ~mask;
    if (end > start) {
        (void)madvise((void *)start, end - start, MADV_DONTNEED);
    }
}

/* After the unpack loop: move a complete staging dir into place. If another first start got
   there first, use its (verified) copy and drop ours. */
static void gantry_finish(filename_char_t *payload_path, filename_char_t *first_filename) {
    if (gantry_stage[0] == 0) {
        return;
    }
    umask(gantry_old_umask);
    if (chmod(gantry_stage, 0755) != 0) {
        gantry_die_errno(errno, "create");
    }
    int res = renameat2(AT_FDCWD, gantry_stage, AT_FDCWD, gantry_final, RENAME_NOREPLACE);
    if (res != 0 && (errno == EINVAL || errno == ENOSYS)) {
        /* No RENAME_NOREPLACE here: rename() still never replaces a non-empty directory, nor,
           in a sticky /tmp, anybody else's. */
        res = rename(gantry_stage, gantry_final);
    }
    if (res != 0) {
        int error = errno;
        if (error != EEXIST && error != ENOTEMPTY) {
            gantry_die_errno(error, "create");
        }
        gantry_rmtree(gantry_stage);
    }
    size_t stage_len = strlen(gantry_stage);
    gantry_stage[0] = 0;
    if (strncmp(first_filename, payload_path, stage_len) == 0) {
        char rest[GANTRY_PATH_MAX];
        snprintf(rest, sizeof(rest), "%s", first_filename + stage_len);
        snprintf(first_filename, GANTRY_PATH_MAX, "%s%s", gantry_final, rest);
    }
    payload_path[0] = 0;
    appendStringSafeFilename(payload_path, gantry_final, GANTRY_PATH_MAX);

    int fd = open(gantry_final, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        gantry_die_unusable(errno);
    }
    gantry_verify(fd);
    if (gantry_lockfd >= 0) {
        close(gantry_lockfd);
        gantry_lockfd = -1;
    }
}

/* The forked child could not exec the unpacked program. */
static void gantry_exec_failed(int error) {
    struct statvfs sv;
    if ((error == EACCES || error == EPERM) && statvfs(gantry_final, &sv) == 0 && (sv.f_flag & ST_NOEXEC) != 0) {
        gantry_die("%s is mounted noexec, so gantry cannot run the program it unpacked to %s; mount it with exec "
                   "(compose: tmpfs: %s:rw,exec; docker run --tmpfs %s:exec; a Kubernetes emptyDir is fine), %s",
                   gantry_parent, gantry_final, gantry_parent, gantry_parent, GANTRY_DOC);
    }
    gantry_die("cannot run %s/gantry.bin: %s; remove %s and start gantry again, %s", gantry_final, strerror(error),
               gantry_final, GANTRY_DOC);
}

/* status/version (the healthcheck): the unpacked program takes this process over, so no fork,
   no waiting bootstrap, and its exit status is the command's own. Returns only on failure. */
static void gantry_exec_in_place(char const *program, char **argv) {
    argv[0] = (char *)getBinaryPath();
    unsetenv("NUITKA_ONEFILE_PARENT"); /* no bootstrap to watch for: no watcher thread */
    for (int retry = 0; retry < 10; retry++) {
        execv(program, argv);
        if (errno != ETXTBSY) {
            break;
        }
        usleep(100000); /* as the stock child: a scanner may still hold the file open */
    }
    gantry_exec_failed(errno);
}

/* Reload (SIGHUP) and user signals go to the unpacked program; the bootstrap keeps waiting.
   A hangup from the terminal reaches the program directly, so it is not sent twice. */
extern pid_t handle_process;

static void gantry_forward_signal(int sig, siginfo_t *info, void *ucontext) {
    (void)ucontext;
    int saved = errno;
#if defined(SI_KERNEL)
    bool from_terminal = info->si_code == SI_KERNEL;
#else
    bool from_terminal = false;
#endif
    if (handle_process > 0 && !from_terminal) {
        kill(handle_process, sig);
    }
    errno = saved;
}

static void gantry_install_forwarding(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = gantry_forward_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGHUP, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGUSR2, &sa, NULL);
}
