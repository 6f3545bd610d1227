/*
 * Preloaded into the FRR daemons of a namespace lab (twin/lab/routing/frr.py).
 *
 * FRR 8.4's event loop (lib/thread.c, fd_poll) hands ppoll its next timer truncated to whole
 * milliseconds, so whenever the next timer is less than 1 ms away it polls with a zero timeout,
 * again and again, until the timer is due: measured here, 4,882 ppoll calls in 5 s for one bfdd
 * that sent 16 BFD packets (520,000 calls a second over pod128's daemons at rest), and 2 million
 * zero-timeout polls from pod128's zebras while BGP converged, when the cores were needed.
 *
 * A zero timeout also means "tasks are ready, just check for I/O", and those polls must return
 * at once. The two are told apart by whether a task ran since the last poll: FRR reads the
 * thread's clocks (thread_getrusage) around every task it runs. So, per thread: once a poll
 * has found nothing and no task has run since, the zero-timeout polls that follow wait for an
 * event, or until 1 ms after that poll, by when the timer they wait for is due. A timer then
 * runs at most 1 ms late; an event (I/O, or a task posted by another thread, which pokes the
 * loop's pipe) ends the wait at once.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <poll.h>
#include <signal.h>
#include <time.h>

typedef int (*ppoll_fn)(struct pollfd *, nfds_t, const struct timespec *, const sigset_t *);
typedef void (*getrusage_fn)(void *);

#define NSEC 1000000000L
#define SPIN_NS 1000000L

/* monotonic ns at which a poll found nothing, no task having run since; 0: not idle */
static __thread long long idle_since;

static long long now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * NSEC + ts.tv_nsec;
}

/* libfrr calls it before and after each task it runs (thread_call), through its PLT */
void thread_getrusage(void *usage)
{
	static getrusage_fn real;

	if (!real)
		real = (getrusage_fn)dlsym(RTLD_NEXT, "thread_getrusage");
	idle_since = 0;
	real(usage);
}

int ppoll(struct pollfd *fds, nfds_t nfds, const struct timespec *timeout, const sigset_t *sigmask)
{
	static ppoll_fn real;
	int zero = timeout && timeout->tv_sec == 0 && timeout->tv_nsec == 0;
	int found = -2;

	if (!real)
		real = (ppoll_fn)dlsym(RTLD_NEXT, "ppoll");
	if (zero && idle_since) {
		long long left = idle_since + SPIN_NS - now_ns();

		if (left > 0) {
			struct timespec rest = { left / NSEC, left % NSEC };

			found = real(fds, nfds, &rest, sigmask);
		}
	}
	if (found == -2)
		found = real(fds, nfds, timeout, sigmask);
	if (found != 0)
		idle_since = 0;
	else if (!zero || !idle_since) /* a wait that timed out; or the first of a zero-timeout streak */
		idle_since = now_ns();
	return found;
}
