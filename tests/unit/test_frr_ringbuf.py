"""bgpd's ring-buffer fix (twin/lab/native/frr_ringbuf.c), on the installed libfrr's own ring buffers:
a wiped ring reads as zeros and empty, and its pages are given back instead of made resident."""

from frr_preloads import needs, run

# Runs in a child with (or without) the preload: libfrr is loaded into the global scope, and
# ringbuf_wipe is looked up there, as bgpd's call to it is resolved.
RING = r"""
import ctypes, json, sys
frr = ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
scope = ctypes.CDLL(None)
libc = ctypes.CDLL("libc.so.6")
frr.ringbuf_new.restype = ctypes.c_void_p
frr.ringbuf_new.argtypes = [ctypes.c_size_t]
for name in ("ringbuf_put", "ringbuf_remain"):
    getattr(frr, name).restype = ctypes.c_size_t
frr.ringbuf_put.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
frr.ringbuf_remain.argtypes = [ctypes.c_void_p]
scope.ringbuf_wipe.argtypes = [ctypes.c_void_p]
PAGE = 4096
out = {}
for size in (5 * 65535, 3000):  # bgpd's ring (mmap'd by malloc), and one inside the heap
    ring = frr.ringbuf_new(size)
    fields = ctypes.cast(ring, ctypes.POINTER(ctypes.c_uint64))
    data = fields[4]  # FRR's struct ringbuf: size, start, end, empty, data
    frr.ringbuf_put(ring, b"\xab" * size, size)
    scope.ringbuf_wipe(ring)
    first = data - data % PAGE
    pages = (data + size - first + PAGE - 1) // PAGE
    vec = (ctypes.c_ubyte * pages)()
    assert libc.mincore(ctypes.c_void_p(first), pages * PAGE, vec) == 0
    out[size] = {"size_field": fields[0], "remain": frr.ringbuf_remain(ring),
                 "empty": ctypes.cast(ring + 24, ctypes.POINTER(ctypes.c_bool))[0],
                 "nonzero": sum(1 for b in ctypes.string_at(data, size) if b),
                 "resident": sum(v & 1 for v in vec), "pages": pages}
print(json.dumps(out))
"""


def _wipe(preload: bool) -> dict:
    return run(RING, "ringbuf", preload)


pytestmark = needs("ringbuf")


def test_a_wiped_ring_reads_empty_and_zero_with_the_fix():
    for size, ring in _wipe(True).items():
        assert ring["size_field"] == int(size), f"libfrr's struct ringbuf is not laid out as the fix reads it: {ring}"
        assert (ring["remain"], ring["empty"], ring["nonzero"]) == (0, True, 0), ring


def test_the_fix_gives_the_wiped_pages_back():
    big = str(5 * 65535)
    shipped, fixed = _wipe(False)[big], _wipe(True)[big]
    assert shipped["resident"] == shipped["pages"], f"libfrr's own wipe should touch every page: {shipped}"
    assert fixed["resident"] <= 2, f"{fixed['resident']} of {fixed['pages']} pages resident after the fix's wipe"
