/*
 * One job per checkpoint root (include/libra/checkpoint.h, ckpt_lock): ROOT/LOCK made
 * with O_CREAT | O_EXCL. What the holder wrote decides whether a lock found there is
 * stale: the same host and a pid that no longer runs (no such process, a zombie not
 * reaped yet -- a killed job's ranks can linger so in a container -- or a pid reused
 * by a process that started later than the holder; kill(pid, 0) where /proc is
 * missing), or
 * the same Slurm job id with a higher $SLURM_RESTART_COUNT (a requeued job starting
 * again, on any node). A lock held on another host cannot be checked from here: the
 * message says how to remove it.
 */
#define _POSIX_C_SOURCE 200809L
#include "libra/checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "libra/config.h"
#include "libra/errmsg.h"

#define LOCK_NAME "LOCK"

void ckpt_root_of(const struct libra_config *cfg, char *out, size_t cap)
{
    if (cfg->run.checkpoint_dir[0])
        snprintf(out, cap, "%s", cfg->run.checkpoint_dir);
    else
        snprintf(out, cap, "%.300s/%.100s-ckpt", cfg->output.dir, cfg->run.name);
}

struct holder {
    char host[256];
    long pid;
    char job[64];
    long restart; /* $SLURM_RESTART_COUNT: a requeued job's count grows */
    unsigned long long start; /* the process's start time (/proc/PID/stat), 0 unknown */
};

/* The state letter and start time of process pid from /proc (Linux); 0, or -1 if
 * there is no such process or no /proc to ask. */
static int proc_stat(long pid, char *state, unsigned long long *start)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* the command name may hold spaces */
    if (!p) return -1;
    /* after ") ": field 3 state, then fields 4..21, then 22 starttime */
    char st = 0;
    unsigned long long t = 0;
    int k = sscanf(p + 1, " %c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d "
                          "%*d %*d %*d %llu", &st, &t);
    if (k != 2) return -1;
    *state = st;
    *start = t;
    return 0;
}

static void me(struct holder *h)
{
    if (gethostname(h->host, sizeof h->host) != 0) snprintf(h->host, sizeof h->host, "?");
    h->host[sizeof h->host - 1] = '\0';
    h->pid = (long)getpid();
    const char *job = getenv("SLURM_JOB_ID"), *restart = getenv("SLURM_RESTART_COUNT");
    snprintf(h->job, sizeof h->job, "%s", job && *job ? job : "-");
    h->restart = restart && *restart ? strtol(restart, NULL, 10) : 0;
    char state;
    if (proc_stat(h->pid, &state, &h->start) != 0) h->start = 0;
}

/* Reads a lock file; 0, or -1 if it cannot be read or parsed. */
static int read_holder(const char *path, struct holder *h)
{
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    memset(h, 0, sizeof *h);
    int n = fscanf(f, "host %255s pid %ld job %63s restart %ld", h->host, &h->pid, h->job,
                   &h->restart);
    if (n == 4 && fscanf(f, " start %llu", &h->start) != 1) h->start = 0;
    fclose(f);
    return n == 4 ? 0 : -1;
}

static int write_holder(int fd, const struct holder *h)
{
    char text[512];
    int n = snprintf(text, sizeof text, "host %s\npid %ld\njob %s\nrestart %ld\nstart %llu\n",
                     h->host, h->pid, h->job, h->restart, h->start);
    return n > 0 && write(fd, text, (size_t)n) == n && fsync(fd) == 0 ? 0 : -1;
}

/* 1 if the holder h is gone (as far as this process can tell), else 0. */
static int stale(const struct holder *h, const struct holder *self)
{
    if (strcmp(h->job, "-") != 0 && strcmp(h->job, self->job) == 0 && self->restart > h->restart)
        return 1; /* this Slurm job, requeued */
    if (strcmp(h->host, self->host) != 0) return 0;
    if (h->pid == self->pid) return 1;
    if (h->pid <= 0) return 0;
    char state;
    unsigned long long start;
    if (proc_stat(h->pid, &state, &start) == 0) /* Linux: a zombie, or the pid reused */
        return state == 'Z' || state == 'X' || (h->start && start != h->start);
    return kill((pid_t)h->pid, 0) != 0 && errno == ESRCH;
}

int ckpt_lock(const char *root, int *took_over, char *err, size_t errlen)
{
    *took_over = 0;
    if (ckpt_mkdir_p(root, err, errlen)) return -1;
    char path[4200];
    snprintf(path, sizeof path, "%s/" LOCK_NAME, root);
    struct holder self;
    me(&self);
    for (int attempt = 0; attempt < 2; attempt++) {
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
        if (fd >= 0) {
            int rc = write_holder(fd, &self);
            close(fd);
            if (rc == 0) return 0;
            unlink(path);
            errmsg_set(err, errlen, "cannot write the checkpoint lock %s: %s", path,
                       strerror(errno));
            return -1;
        }
        if (errno != EEXIST) {
            errmsg_set(err, errlen, "cannot create the checkpoint lock %s: %s", path,
                       strerror(errno));
            return -1;
        }
        struct holder h;
        if (read_holder(path, &h) != 0) {
            errmsg_set(err, errlen, "%s exists but is not a libra lock (another job's "
                       "checkpoints? remove it if no job uses %s)", path, root);
            return -1;
        }
        if (!stale(&h, &self)) {
            errmsg_set(err, errlen, "checkpoint directory %s is in use by the job of pid %ld "
                       "on host %s (Slurm job %s): one job per checkpoint directory (set "
                       "run.checkpoint_dir, or remove %s if that job is gone)", root, h.pid,
                       h.host, h.job, path);
            return -1;
        }
        if (unlink(path) != 0 && errno != ENOENT) {
            errmsg_set(err, errlen, "cannot remove the stale checkpoint lock %s: %s", path,
                       strerror(errno));
            return -1;
        }
        *took_over = 1;
    }
    errmsg_set(err, errlen, "checkpoint lock %s: another job took it at the same moment", path);
    return -1;
}

void ckpt_unlock(const char *root)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/" LOCK_NAME, root);
    struct holder h, self;
    me(&self);
    if (read_holder(path, &h) == 0 && h.pid == self.pid && strcmp(h.host, self.host) == 0)
        unlink(path);
}
