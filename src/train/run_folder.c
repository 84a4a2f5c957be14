#include "train/run_folder.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "train/checkpoint.h"
#include "checkpoint/safetensors.h"
#include "core/file_open.h"
#include "core/log.h"

// ---- the lock ------------------------------------------------------------------------------------------

static int lock_fd = -1;  // held for the process's life (the kernel drops it when the process ends)
static dev_t lock_dev;    // the folder it locks
static ino_t lock_ino;

// A run that ends leaves the lock file empty: a file that still names someone was left by a run that died.
static void clear_lock_file(void) {
    if (lock_fd >= 0 && ftruncate(lock_fd, 0) == 0) close(lock_fd);
}

int run_folder_lock(const char *dir, int dry_run, char *err, size_t err_len) {
    struct stat st;
    if (!dir[0] || stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) return 0;
    if (!dry_run && lock_fd >= 0 && st.st_dev == lock_dev && st.st_ino == lock_ino) return 0;
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/" RUN_FOLDER_LOCK, dir);
    int fd = open(path, dry_run ? O_RDONLY | O_CLOEXEC : O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0 && dry_run && errno == ENOENT) return 0;
    if (fd < 0) {
        snprintf(err, err_len, "checkpoint.dir: cannot open the lock file '%s': %s", path, strerror(errno));
        return 2;
    }
    char holder[256] = "";
    ssize_t n = pread(fd, holder, sizeof holder - 1, 0);
    holder[n > 0 ? n : 0] = '\0';
    holder[strcspn(holder, "\n")] = '\0';
    long pid = 0;
    char host[200] = "?";
    int named = sscanf(holder, "%ld %199s", &pid, host) >= 1;
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        close(fd);
        if (e == EWOULDBLOCK && named)
            snprintf(err, err_len,
                     "checkpoint.dir: '%s' is in use by another run (pid %ld on host %s, per %s): "
                     "wait for it to end, or give this run another checkpoint.dir",
                     dir, pid, host, path);
        else if (e == EWOULDBLOCK)
            snprintf(err, err_len,
                     "checkpoint.dir: '%s' is in use by another run (it holds %s): wait for it to "
                     "end, or give this run another checkpoint.dir",
                     dir, path);
        else
            snprintf(err, err_len, "checkpoint.dir: cannot lock '%s': %s", path, strerror(e));
        return 2;
    }
    if (dry_run) {
        close(fd);
        return 0;
    }
    char self[256], me[200] = "?";
    gethostname(me, sizeof me - 1);
    int len = snprintf(self, sizeof self, "%ld %s\n", (long)getpid(), me);
    if (named && pid != (long)getpid())
        log_info("%s: took over the lock of pid %ld on host %s, a run that ended without releasing it", path,
                 pid, host);
    if (ftruncate(fd, 0) != 0 || pwrite(fd, self, (size_t)len, 0) != len) {
        snprintf(err, err_len, "checkpoint.dir: cannot write the lock file '%s': %s", path, strerror(errno));
        close(fd);
        return 2;
    }
    static int registered = 0;
    if (!registered) registered = atexit(clear_lock_file) == 0;
    if (lock_fd >= 0) close(lock_fd);
    lock_fd = fd, lock_dev = st.st_dev, lock_ino = st.st_ino;
    return 0;
}

// ---- the checkpoints in a folder -----------------------------------------------------------------------

typedef struct Found {
    char name[NAME_MAX + 1];
    struct timespec mtime;
} Found;

// The *.safetensors files of dir (not a writer's temp files), last.safetensors first, then the newest
// first. Returns the count; *out is malloc'd (free it).
static int list_safetensors(const char *dir, Found **out) {
    *out = NULL;
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0, cap = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        size_t len = strlen(e->d_name);
        const size_t ext = strlen(".safetensors");
        if (len <= ext || strcmp(e->d_name + len - ext, ".safetensors") != 0) continue;
        char path[PATH_MAX + NAME_MAX + 2];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 8;
            Found *grown = realloc(*out, (size_t)cap * sizeof *grown);
            if (!grown) break;
            *out = grown;
        }
        snprintf((*out)[n].name, sizeof(*out)[n].name, "%s", e->d_name);
        (*out)[n++].mtime = st.st_mtim;
    }
    closedir(d);
    for (int i = 1; i < n; i++)  // insertion sort: a folder holds a handful
        for (int j = i; j > 0; j--) {
            const Found *a = &(*out)[j - 1], *b = &(*out)[j];
            int b_last = !strcmp(b->name, RUN_FOLDER_CHECKPOINT),
                a_last = !strcmp(a->name, RUN_FOLDER_CHECKPOINT);
            int b_newer = b->mtime.tv_sec > a->mtime.tv_sec ||
                          (b->mtime.tv_sec == a->mtime.tv_sec && b->mtime.tv_nsec > a->mtime.tv_nsec);
            if (a_last || (!b_last && !b_newer)) break;
            Found t = (*out)[j - 1];
            (*out)[j - 1] = (*out)[j], (*out)[j] = t;
        }
    return n;
}

// Whether path is an amptrain checkpoint by its header: 1 (its step into step, "?" when unreadable), 0 not
// one (another program's safetensors), -1 unreadable (why says so). With `whole` the data must match its
// checksum too.
static int open_checkpoint(const char *path, int whole, char *step, size_t step_cap, char *why,
                           size_t why_cap) {
    SafetensorsFile *f = st_open(path, why, why_cap);
    if (!f) return -1;
    const char *format = st_meta(f, "format"), *at = st_meta(f, "step");
    int rc = format && !strncmp(format, CHECKPOINT_FORMAT_PREFIX, strlen(CHECKPOINT_FORMAT_PREFIX));
    snprintf(step, step_cap, "%s", at ? at : "?");
    if (rc && whole && st_load_checked(f, why, why_cap) < 0) rc = -1;
    st_close(f);
    return rc;
}

void run_folder_find_resume(const char *dir, char *path, size_t cap) {
    path[0] = '\0';
    Found *found;
    int n = list_safetensors(dir, &found);
    for (int i = 0; i < n && !path[0]; i++) {
        char file[PATH_MAX + NAME_MAX + 2], step[32], why[1024];
        snprintf(file, sizeof file, "%s/%s", dir, found[i].name);
        int rc = open_checkpoint(file, 1, step, sizeof step, why, sizeof why);
        if (rc < 0) log_warn("checkpoint.resume auto passes over %s: %s", file, why);
        if (rc == 1) snprintf(path, cap, "%s", file);
    }
    free(found);
}

// The first checkpoint of an earlier run in dir (last.safetensors whatever it holds, or another amptrain
// checkpoint): its name and step, or 0 when there is none.
static int earlier_checkpoint(const char *dir, char *name, size_t name_cap, char *step, size_t step_cap) {
    Found *found;
    int n = list_safetensors(dir, &found), hit = 0;
    for (int i = 0; i < n && !hit; i++) {
        char file[PATH_MAX + NAME_MAX + 2], why[1024];
        snprintf(file, sizeof file, "%s/%s", dir, found[i].name);
        int rc = open_checkpoint(file, 0, step, step_cap, why, sizeof why);
        if (rc == 1 || !strcmp(found[i].name, RUN_FOLDER_CHECKPOINT)) {
            if (rc != 1) snprintf(step, step_cap, "unreadable");
            snprintf(name, name_cap, "%s", found[i].name);
            hit = 1;
        }
    }
    free(found);
    return hit;
}

int run_folder_check_fresh(const Config *cfg, char *err, size_t err_len) {
    const char *dir = cfg->checkpoint.dir, *metrics = cfg->log.metrics;
    char name[NAME_MAX + 1], step[32];
    if (dir[0] && earlier_checkpoint(dir, name, sizeof name, step, sizeof step)) {
        snprintf(err, err_len,
                 "checkpoint.dir: '%s' holds %s (step %s) of an earlier run: continue it with "
                 "checkpoint.resume=auto, or start over with checkpoint.overwrite=true (its checkpoints are "
                 "removed%s)",
                 dir, name, step, metrics[0] ? ", log.metrics emptied" : "");
        return 2;
    }
    struct stat st;
    if (metrics[0] && stat(metrics, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
        snprintf(
            err, err_len,
            "log.metrics: '%s' holds %lld bytes of an earlier run's records: give this run a file of its "
            "own with log.metrics=PATH, continue that run with checkpoint.resume (auto: from the newest "
            "checkpoint in checkpoint.dir), or start over with checkpoint.overwrite=true (the file is emptied)",
            metrics, (long long)st.st_size);
        return 2;
    }
    return 0;
}

// ---- paths that must differ ----------------------------------------------------------------------------

// path's folder resolved (realpath) and its last name: the same string for two names of one file that
// does not exist yet. The path as given when its folder does not exist either.
static void canonical_name(const char *path, char *out, size_t cap) {
    char dir[PATH_MAX], real[PATH_MAX];
    const char *slash = strrchr(path, '/');
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) : 1,
             slash ? (slash == path ? "/" : path) : ".");
    if (realpath(dir, real))
        snprintf(out, cap, "%s/%s", real, slash ? slash + 1 : path);
    else
        snprintf(out, cap, "%s", path);
}

// 1 when a and b name the same regular file (same device and inode), or, where neither exists, the same
// name. Devices (log.metrics /dev/null) are shared by design: never the same.
static int same_file(const char *a, const char *b) {
    struct stat sa, sb;
    int ha = stat(a, &sa) == 0, hb = stat(b, &sb) == 0;
    if ((ha && !S_ISREG(sa.st_mode)) || (hb && !S_ISREG(sb.st_mode))) return 0;
    if (ha && hb) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    if (ha || hb) return 0;
    char ca[2 * PATH_MAX], cb[2 * PATH_MAX];
    canonical_name(a, ca, sizeof ca);
    canonical_name(b, cb, sizeof cb);
    return strcmp(ca, cb) == 0;
}

typedef struct Named {
    const char *what;
    char path[PATH_MAX + 64];
} Named;

int run_folder_check_paths(const Config *cfg, const char *resume, char *err, size_t err_len) {
    enum { METRICS, CHECKPOINT, LOCK, CONFIG_COPY, N_OUT };
    enum { CONFIG_FILE, RESUME, INIT, N_IN };
    Named out[N_OUT] = {{"log.metrics", ""},
                        {"checkpoint.dir's checkpoint", ""},
                        {"checkpoint.dir's lock", ""},
                        {"checkpoint.dir's config.yaml", ""}};
    Named in[N_IN] = {{"the config file", ""}, {"checkpoint.resume", ""}, {"model.init", ""}};
    const char *dir = cfg->checkpoint.dir;
    snprintf(out[METRICS].path, sizeof out[METRICS].path, "%s", cfg->log.metrics);
    if (dir[0]) {
        snprintf(out[CHECKPOINT].path, sizeof out[CHECKPOINT].path, "%s/" RUN_FOLDER_CHECKPOINT, dir);
        snprintf(out[LOCK].path, sizeof out[LOCK].path, "%s/" RUN_FOLDER_LOCK, dir);
        snprintf(out[CONFIG_COPY].path, sizeof out[CONFIG_COPY].path, "%s/" RUN_FOLDER_CONFIG, dir);
    }
    snprintf(in[CONFIG_FILE].path, sizeof in[CONFIG_FILE].path, "%s", cfg->source_path);
    snprintf(in[RESUME].path, sizeof in[RESUME].path, "%s", resume);
    // a resume does not read model.init
    snprintf(in[INIT].path, sizeof in[INIT].path, "%s", resume[0] ? "" : cfg->model.init);
    for (int o = 0; o < N_OUT; o++) {
        if (!out[o].path[0]) continue;
        const Named *hit = NULL;
        for (int i = 0; i < N_IN && !hit; i++) {
            // The run writes its checkpoint over the one it resumed, and keeps a config.yaml it was given.
            int allowed = (o == CHECKPOINT && i == RESUME) || (o == CONFIG_COPY && i == CONFIG_FILE);
            if (!allowed && in[i].path[0] && same_file(out[o].path, in[i].path)) hit = &in[i];
        }
        for (int p = o + 1; p < N_OUT && !hit; p++)
            if (out[p].path[0] && same_file(out[o].path, out[p].path)) hit = &out[p];
        if (hit) {
            snprintf(err, err_len,
                     "%s: '%s' is the same file as %s '%s': an output must not overwrite the config, "
                     "the resume file, model.init or another output",
                     out[o].what, out[o].path, hit->what, hit->path);
            return 2;
        }
    }
    return 0;
}

// ---- the start ------------------------------------------------------------------------------------------

// text to dir/name through a temp file and a rename: a reader sees the old file or the new one.
static int write_atomic(const char *dir, const char *name, const char *text) {
    char path[PATH_MAX + NAME_MAX + 2];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    const char *step = "";
    if (file_write_atomic(path, text, strlen(text), &step) == 0) return 1;
    log_warn("cannot write %s: %s: %s", path, step, strerror(errno));
    return 0;
}

void run_folder_begin(const Config *cfg, const char *config_text) {
    const char *dir = cfg->checkpoint.dir;
    if (!dir[0]) return;
    char copy[PATH_MAX + 32];
    snprintf(copy, sizeof copy, "%s/" RUN_FOLDER_CONFIG, dir);
    if (!same_file(copy, cfg->source_path)) write_atomic(dir, RUN_FOLDER_CONFIG, config_text);
    if (!cfg->checkpoint.overwrite) return;
    char name[NAME_MAX + 1], step[32];
    while (earlier_checkpoint(dir, name, sizeof name, step, sizeof step)) {
        char file[PATH_MAX + NAME_MAX + 2];
        snprintf(file, sizeof file, "%s/%s", dir, name);
        if (unlink(file) != 0) {
            log_warn("checkpoint.overwrite: cannot remove %s: %s", file, strerror(errno));
            return;
        }
        log_info("checkpoint.overwrite: removed %s (step %s) of the earlier run", file, step);
    }
}
