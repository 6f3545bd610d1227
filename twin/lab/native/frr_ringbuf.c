/*
 * Preloaded into the bgpd of a namespace lab (twin/lab/routing/frr.py).
 *
 * FRR 8.4's bgpd gives every peer a 320 KiB input ring buffer (room for five 64 KiB extended
 * messages) and wipes it with memset when a connection is handed over or reset. The memset
 * makes every page of the buffer resident, although a fabric session carries a few KiB: at
 * pod128 that was most of bgpd's memory (a spine's 32 sessions held 21 MiB of ring buffers).
 *
 * So ringbuf_wipe zeroes the buffer's whole pages with madvise(MADV_DONTNEED), which on
 * malloc's private anonymous memory gives zero-filled pages on the next touch (what glibc's
 * own free does), and memset only the partial pages at either end. The ring is then reset by
 * FRR's own ringbuf_reset. Only the buffer's size and data pointer are read, at the offsets
 * of FRR's struct ringbuf (lib/ringbuf.h); tests/unit/test_frr_ringbuf.py checks them against
 * the installed libfrr.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>

struct ringbuf {
	size_t size;
	ssize_t start;
	ssize_t end;
	bool empty;
	uint8_t *data;
};

typedef void (*reset_fn)(struct ringbuf *);

static void zero(uint8_t *from, size_t size)
{
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t start = (uintptr_t)from, end = start + size;
	uintptr_t first = (start + page - 1) & ~(page - 1), last = end & ~(page - 1);

	if (last <= first) {
		memset(from, 0, size);
		return;
	}
	memset(from, 0, first - start);
	memset((void *)last, 0, end - last);
	if (madvise((void *)first, last - first, MADV_DONTNEED) != 0)
		memset((void *)first, 0, last - first);
}

void ringbuf_wipe(struct ringbuf *buf)
{
	static reset_fn reset;

	if (!reset)
		reset = (reset_fn)dlsym(RTLD_NEXT, "ringbuf_reset");
	zero(buf->data, buf->size);
	reset(buf);
}
