/*
 * fakeclock.c: preloaded (LD_PRELOAD) into a child process, it adds an
 * offset to the wall clock that process reads: clock_gettime of the
 * CLOCK_REALTIME family, gettimeofday and time. The offset, in
 * nanoseconds, is the int64 in the file named by FAKECLOCK_FILE, which the
 * parent maps too and changes while the child runs: a step of the system
 * clock (an NTP step, an operator's date -s) on that process alone. The
 * monotonic clocks are left alone, as a step leaves them.
 *
 * It calls the kernel directly (syscall) and allocates nothing, so it
 * works in processes whose allocator reads the clock while it starts
 * (redis-server with jemalloc), where a preload that looks the real
 * functions up with dlsym recurses through the allocator.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static const volatile int64_t *offset_ns;

__attribute__((constructor)) static void fakeclock_init(void) {
	const char *path = getenv("FAKECLOCK_FILE");
	if (path == NULL) return;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) return;
	void *p = mmap(NULL, sizeof(int64_t), PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (p != MAP_FAILED) offset_ns = p;
}

static int64_t offset(void) {
	const volatile int64_t *p = offset_ns;
	return p == NULL ? 0 : __atomic_load_n(p, __ATOMIC_RELAXED);
}

static int is_wall(clockid_t c) {
	return c == CLOCK_REALTIME || c == CLOCK_REALTIME_COARSE || c == CLOCK_TAI;
}

int clock_gettime(clockid_t c, struct timespec *ts) {
	long r = syscall(SYS_clock_gettime, c, ts);
	if (r != 0 || !is_wall(c)) return (int)r;
	int64_t ns = (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec + offset();
	ts->tv_sec = ns / 1000000000;
	ts->tv_nsec = ns % 1000000000;
	return 0;
}

/* Declared here, not through <sys/time.h>, whose prototype says tv is
 * never NULL; callers may pass NULL all the same. */
struct fakeclock_timeval { time_t tv_sec; long tv_usec; };

int gettimeofday(struct fakeclock_timeval *tv, void *tz) {
	(void)tz;
	struct timespec ts;
	if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return -1;
	if (tv != NULL) {
		tv->tv_sec = ts.tv_sec;
		tv->tv_usec = ts.tv_nsec / 1000;
	}
	return 0;
}

time_t time(time_t *t) {
	struct timespec ts;
	if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return (time_t)-1;
	if (t != NULL) *t = ts.tv_sec;
	return ts.tv_sec;
}
