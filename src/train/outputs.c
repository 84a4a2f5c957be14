#include "train/outputs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint/safetensors.h"
#include "core/log.h"
#include "train/run_folder.h"

int outputs_make_dir(const char *dir, size_t *created) {
    char path[PATH_MAX];
    if (created) *created = 0;
    size_t len = strlen(dir);
    if (len == 0 || len >= sizeof path) {
        errno = len ? ENAMETOOLONG : ENOENT;
        return -1;
    }
    memcpy(path, dir, len + 1);
    for (size_t i = 1; i <= len; i++) {
        if (path[i] != '/' && path[i] != '\0') continue;
        char keep = path[i];
        path[i] = '\0';
        if (mkdir(path, 0755) == 0) {
            if (created && *created == 0) *created = i;
        } else if (errno != EEXIST) {
            return -1;
        }
        path[i] = keep;
    }
    struct stat st;
    if (stat(dir, &st) != 0) return -1;
    if (!S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        return -1;
    }
    return 0;
}

// rmdir of the folders outputs_make_dir created: `dir` and its parents, up to the prefix `created` long.
static void remove_made_dirs(const char *dir, size_t created) {
    if (created == 0) return;
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s", dir);
    while (strlen(path) >= created) {
        rmdir(path);
        char *slash = strrchr(path, '/');
        if (!slash) break;
        *slash = '\0';
    }
}

// Creates `dir/name`, writes, fsyncs, renames it beside itself, removes it, fsyncs the folder: what an
// atomic checkpoint write does, under its longest name. Returns 0, or 2 with the failing step in err.
static int probe_folder(const char *key, const char *dir, const char *name, char *err, size_t err_len) {
    char temp[PATH_MAX + NAME_MAX + 2], moved[PATH_MAX + 64];
    snprintf(temp, sizeof temp, "%s/%s", dir, name);
    snprintf(moved, sizeof moved, "%s/.amptrain-probe.%ld", dir, (long)getpid());
    static const char text[] = "amptrain write probe\n";
    const char *step = "create";
    int fd = open(temp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int ok = fd >= 0;
    if (ok && !(ok = write(fd, text, sizeof text - 1) == (ssize_t)(sizeof text - 1))) step = "write";
    if (ok && !(ok = fsync(fd) == 0)) step = "fsync";
    if (fd >= 0 && close(fd) != 0 && ok) ok = 0, step = "close";
    if (ok && !(ok = rename(temp, moved) == 0)) step = "rename";
    int saved = errno;
    unlink(ok ? moved : temp);
    if (ok) {
        int dfd = open(dir, O_RDONLY | O_DIRECTORY);
        if (!(ok = dfd >= 0 && fsync(dfd) == 0)) step = "fsync of the folder";
        saved = errno;
        if (dfd >= 0) close(dfd);
    }
    if (ok) return 0;
    snprintf(err, err_len, "%s: cannot write in '%s': %s of '%s' failed: %s", key, dir, step, name,
             strerror(saved));
    return 2;
}

// Makes `dir` and probes it with `name`; *created as outputs_make_dir.
static int prove_folder(const char *key, const char *dir, const char *name, size_t *created, char *err,
                        size_t err_len) {
    if (outputs_make_dir(dir, created) != 0) {
        snprintf(err, err_len, "%s: cannot create the folder '%s': %s", key, dir, strerror(errno));
        return 2;
    }
    return probe_folder(key, dir, name, err, err_len);
}

// A dead run's checkpoint temp file: "<name>.safetensors.tmp.<pid>" whose process no longer exists.
static long dead_writer(const char *name) {
    const char *infix = strstr(name, ".safetensors" ST_TEMP_INFIX);
    if (!infix) return 0;
    const char *digits = infix + strlen(".safetensors" ST_TEMP_INFIX);
    if (!*digits || strspn(digits, "0123456789") != strlen(digits) || strlen(digits) > 9) return 0;
    long pid = atol(digits);
    if (pid <= 0 || pid == (long)getpid()) return 0;
    return kill((pid_t)pid, 0) != 0 && errno == ESRCH ? pid : 0;
}

static void clear_dead_temp_files(const char *dir, int dry_run) {
    DIR *d = opendir(dir);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        long pid = dead_writer(e->d_name);
        if (!pid) continue;
        char path[PATH_MAX + NAME_MAX + 2];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (dry_run)
            log_info("%s: temp file of a run that died (pid %ld); removed when training starts", path, pid);
        else if (unlink(path) == 0)
            log_info("removed %s, the temp file of a run that died (pid %ld)", path, pid);
    }
    closedir(d);
}

static int prove_checkpoint_dir(const char *dir, size_t *created, char *err, size_t err_len) {
    char name[NAME_MAX + 1];
    snprintf(name, sizeof name, RUN_FOLDER_CHECKPOINT ST_TEMP_INFIX "%ld", (long)getpid());
    return prove_folder("checkpoint.dir", dir, name, created, err, err_len);
}

// log.metrics: a device (/dev/null) is opened as it is; a file gets its folder made and probed, its name
// must fit the folder's file system, and an existing one must open for appending.
static int prove_metrics_file(const char *path, size_t *created, char *made_dir, char *err, size_t err_len) {
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(err, err_len, "log.metrics: '%s' is a folder, not a file", path);
        return 2;
    }
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) return 0;
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    if (!*base) {
        snprintf(err, err_len, "log.metrics: '%s' names a folder, not a file", path);
        return 2;
    }
    if (slash == path)
        snprintf(made_dir, PATH_MAX, "/");
    else
        snprintf(made_dir, PATH_MAX, "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
    char name[NAME_MAX + 1];
    snprintf(name, sizeof name, ".amptrain-metrics" ST_TEMP_INFIX "%ld", (long)getpid());
    int rc = prove_folder("log.metrics", made_dir, name, created, err, err_len);
    long name_max = rc == 0 ? pathconf(made_dir, _PC_NAME_MAX) : -1;
    if (name_max > 0 && strlen(base) > (size_t)name_max) {
        snprintf(err, err_len, "log.metrics: cannot write '%s': %s", path, strerror(ENAMETOOLONG));
        return 2;
    }
    if (rc == 0 && access(path, F_OK) == 0) {
        int fd = open(path, O_WRONLY | O_APPEND);
        if (fd < 0) {
            snprintf(err, err_len, "log.metrics: cannot write '%s': %s", path, strerror(errno));
            return 2;
        }
        rc = outputs_lock_metrics(fd, path, err, err_len);
        close(fd);
    }
    return rc;
}

int outputs_lock_metrics(int fd, const char *path, char *err, size_t err_len) {
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) return 0;
    if (errno == EWOULDBLOCK)
        snprintf(err, err_len,
                 "log.metrics: '%s' is being written by another run (it holds the file's lock): wait "
                 "for it to end, or give this run another log.metrics",
                 path);
    else
        snprintf(err, err_len, "log.metrics: cannot lock '%s': %s", path, strerror(errno));
    return 2;
}

int outputs_prepare(const Config *cfg, int dry_run, char *err, size_t err_len) {
    const char *dir = cfg->checkpoint.dir, *metrics = cfg->log.metrics;
    size_t dir_made = 0, metrics_made = 0;
    char metrics_dir[PATH_MAX] = "";
    int rc = 0;
    if (dir[0]) rc = prove_checkpoint_dir(dir, &dir_made, err, err_len);
    if (rc == 0 && metrics[0]) rc = prove_metrics_file(metrics, &metrics_made, metrics_dir, err, err_len);
    // The folder may be new: its lock is taken once everything is proven, before the run writes into it.
    if (rc == 0 && dir[0]) rc = run_folder_lock(dir, dry_run, err, err_len);
    if (rc == 0 && dir[0]) clear_dead_temp_files(dir, dry_run);
    if (dry_run || rc != 0) {
        // Leave the disk as it was: a dry run writes nothing, nor does a refused start.
        remove_made_dirs(metrics_dir, metrics_made);
        remove_made_dirs(dir, dir_made);
    }
    return rc;
}

// Descriptors this process holds now: the entries of /proc/self/fd (less the one the listing holds), or
// -1 where there is no /proc.
static int descriptors_open(void) {
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n - 1;
}

int outputs_check_descriptors(int loader_threads, char *err, size_t err_len) {
    struct rlimit lim;
    int held = descriptors_open();
    if (held < 0 || getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY) return 0;
    long need = (long)held + loader_threads + OUTPUTS_WRITE_DESCRIPTORS;
    if (need <= (long)lim.rlim_cur) return 0;
    snprintf(
        err, err_len,
        "file descriptors: this run holds %d once its data is open, and its %d loader thread(s), the checkpoint "
        "and metrics writes need %d more, but ulimit -n allows %ld: raise it (ulimit -n %ld) or use fewer "
        "loader threads (data.workers)",
        held, loader_threads, loader_threads + OUTPUTS_WRITE_DESCRIPTORS, (long)lim.rlim_cur, need);
    return 2;
}
