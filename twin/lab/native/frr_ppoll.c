/*
 * Preloaded into the FRR daemons of a namespace lab (twin/lab/frr.py).
 *
 * FRR 8.4's event loop (lib/thread.c, fd_poll) hands ppoll its next timer truncated to whole
 * milliseconds, so it wakes up to 1 ms before the timer is due, finds it not due, and polls
 * with a zero timeout again and again until it is: measured here, 4,882 ppoll calls in 5 s for
 * one bfdd that sent 16 BFD packets; 520,000 calls a second over pod128's daemons, most of the
 * lab's CPU at rest.
 *
 * So, per thread: after a ppoll with a timeout ends without an event, the zero-timeout polls
 * that follow within 1 ms wait (for an event, or the rest of that millisecond) instead of
 * returning at once. The timer then runs at most 1 ms late; every other poll, and every event,
 * is left alone.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <poll.h>
#include <signal.h>
#include <time.h>

typedef int (*ppoll_fn)(struct pollfd *, nfds_t, const struct timespec *, const sigset_t *);

#define NSEC 1000000000L
#define SPIN_NS 1000000L

static __thread long long spin_until; /* monotonic ns; 0: not after a timeout */

static long long now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * NSEC + ts.tv_nsec;
}

int ppoll(struct pollfd *fds, nfds_t nfds, const struct timespec *timeout, const sigset_t *sigmask)
{
	static ppoll_fn real;
	int zero = timeout && timeout->tv_sec == 0 && timeout->tv_nsec == 0;
	int found;

	if (!real)
		real = (ppoll_fn)dlsym(RTLD_NEXT, "ppoll");
	if (zero && spin_until) {
		long long left = spin_until - now_ns();

		spin_until = 0;
		if (left > 0) {
			struct timespec rest = { left / NSEC, left % NSEC };

			return real(fds, nfds, &rest, sigmask);
		}
	}
	found = real(fds, nfds, timeout, sigmask);
	spin_until = (found == 0 && timeout && !zero) ? now_ns() + SPIN_NS : 0;
	return found;
}
