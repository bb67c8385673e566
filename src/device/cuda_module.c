/*
 * Loading the CUDA device module (include/libra/cuda_module.h) with dlopen: the only
 * place libra touches it, so src/libra links no CUDA library. LIBRA_CUDA_MODULE=host
 * selects the host module instead (include/libra/cuda_host.h: linked in, nothing
 * loaded).
 */
#define _GNU_SOURCE /* dladdr-free: readlink of /proc/self/exe */
#include "libra/cuda_module.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "libra/cuda_host.h"

#ifndef LIBRA_PKGLIBDIR
#define LIBRA_PKGLIBDIR "/usr/local/lib/libra"
#endif
#define MODULE_NAME "libra-cuda.so"

static pthread_once_t once = PTHREAD_ONCE_INIT;
static const struct cuda_api *loaded;
static char load_err[5 * PATH_MAX + 1024]; /* every candidate path fits */

/* The directory of the running program into dir ("" if unknown). */
static void exe_dir(char *dir, size_t cap)
{
    char path[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
    dir[0] = '\0';
    if (n <= 0) return;
    path[n] = '\0';
    char *slash = strrchr(path, '/');
    if (slash) *slash = '\0';
    snprintf(dir, cap, "%s", path);
}

static void load_once(void)
{
    char dir[PATH_MAX], cand[4][PATH_MAX + 32];
    int n = 0;
    const char *env = getenv("LIBRA_CUDA_MODULE");
    if (env && strcmp(env, "host") == 0) { /* the CPU stand-in, for tests without a GPU */
        loaded = cuda_host_api();
        return;
    }
    if (env && *env) snprintf(cand[n++], sizeof cand[0], "%s", env);
    exe_dir(dir, sizeof dir);
    if (dir[0]) {
        snprintf(cand[n++], sizeof cand[0], "%s/" MODULE_NAME, dir);
        snprintf(cand[n++], sizeof cand[0], "%s/../src/" MODULE_NAME, dir);
    }
    snprintf(cand[n++], sizeof cand[0], "%s/" MODULE_NAME, LIBRA_PKGLIBDIR);
    size_t at = (size_t)snprintf(load_err, sizeof load_err, "the CUDA device module");
    for (int i = 0; i < n; i++) {
        if (access(cand[i], F_OK) != 0) {
            at += (size_t)snprintf(load_err + at, at < sizeof load_err ? sizeof load_err - at : 0,
                                   "%s %s", i ? "," : " was not found (tried", cand[i]);
            continue;
        }
        void *h = dlopen(cand[i], RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            snprintf(load_err, sizeof load_err, "cannot load the CUDA device module %s: %s "
                     "(is the CUDA runtime on LD_LIBRARY_PATH?)", cand[i], dlerror());
            return;
        }
        libra_cuda_api_fn fn = (libra_cuda_api_fn)dlsym(h, LIBRA_CUDA_API_SYMBOL);
        const struct cuda_api *api = fn ? fn() : NULL;
        if (!api || api->abi != LIBRA_CUDA_ABI) {
            snprintf(load_err, sizeof load_err, "%s is not a libra CUDA module of this build "
                     "(ABI %d, libra expects %d): rebuild it with this libra", cand[i],
                     api ? api->abi : -1, LIBRA_CUDA_ABI);
            dlclose(h);
            return;
        }
        loaded = api; /* kept loaded for the life of the process */
        return;
    }
    if (at < sizeof load_err)
        snprintf(load_err + at, sizeof load_err - at,
                 ") (build it with ./configure --with-cuda, or set LIBRA_CUDA_MODULE)");
}

const struct cuda_api *cuda_module_load(char *err, size_t errlen)
{
    pthread_once(&once, load_once);
    if (!loaded) snprintf(err, errlen, "%s", load_err);
    return loaded;
}
