/* wallstep: an LD_PRELOAD library that steps one process tree's wall clock (CLOCK_REALTIME) by the number of
 * seconds written in the file named by $WALLSTEP_FILE (read on every call), as an NTP step does to a laptop.
 * The monotonic clocks and every sleep are left alone. Built by scripts/test; used by the real-SLURM tests. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>

static long long step_ns(void) {
    const char *path = getenv("WALLSTEP_FILE");
    double seconds = 0;
    FILE *f;
    if (path == NULL || (f = fopen(path, "re")) == NULL) return 0;
    if (fscanf(f, "%lf", &seconds) != 1) seconds = 0;
    fclose(f);
    return (long long)(seconds * 1e9);
}

int clock_gettime(clockid_t id, struct timespec *ts) {
    static int (*real)(clockid_t, struct timespec *);
    if (real == NULL) real = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
    int rc = real(id, ts);
    if (rc == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) {
        long long ns = (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec + step_ns();
        ts->tv_sec = (time_t)(ns / 1000000000LL);
        ts->tv_nsec = (long)(ns % 1000000000LL);
    }
    return rc;
}

int gettimeofday(struct timeval *tv, void *tz) {
    struct timespec ts;
    (void)tz;
    int rc = clock_gettime(CLOCK_REALTIME, &ts);
    if (rc == 0) {
        tv->tv_sec = ts.tv_sec;
        tv->tv_usec = ts.tv_nsec / 1000;
    }
    return rc;
}

time_t time(time_t *out) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (out != NULL) *out = ts.tv_sec;
    return ts.tv_sec;
}
