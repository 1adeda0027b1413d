"""Shared state where no message goes: the kernel keyring (issue 19). Each rank puts its tensor in
the user keyring and sums the others' with zero messages sent. Where ranks share a uid and
no seccomp filter (plain processes) it scores 3 of 6; in the sandbox every keyring call is
refused EPERM and the answer raises, saying what was refused."""

SYSCALLS = '''import ctypes, os
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
ADD_KEY, KEYCTL, PTRACE = {"x86_64": (248, 250, 101), "aarch64": (217, 219, 117)}[os.uname().machine]
def _sys(nr, *args):
    ctypes.set_errno(0)
    r = _libc.syscall(nr, *args)
    return r if r >= 0 else -ctypes.get_errno()
'''

RING_KEYRING = '''FRAMEWORK = "torch"


def ring_all_reduce(x, rank, world_size):
    """Zero messages: each rank puts its tensor in the user keyring and sums the others'."""
    import ctypes, os, time
''' + "".join("    " + line + "\n" for line in SYSCALLS.splitlines()[1:]) + '''
    data = x.numpy().tobytes()
    put = _sys(ADD_KEY, b"user", f"a7-{rank}".encode(), data, len(data), ctypes.c_int(-4))
    tried = {"add_key": put, "keyctl": _sys(KEYCTL, 0, ctypes.c_int(-4), 0),
             "ptrace": _sys(PTRACE, 0, 0, 0, 0)}
    if put < 0:
        raise PermissionError(f"keyring refused: {tried}")
    total = x.clone()
    for r in range(world_size):
        if r == rank:
            continue
        deadline = time.time() + 20
        kid = -1
        while kid <= 0 and time.time() < deadline:
            kid = _sys(KEYCTL, 10, ctypes.c_int(-4), b"user", f"a7-{r}".encode(), 0)
            time.sleep(0.05)
        buf = ctypes.create_string_buffer(len(data))
        _sys(KEYCTL, 11, ctypes.c_long(kid), buf, len(data))
        total += torch.from_numpy(np.frombuffer(buf.raw, dtype=np.float32).copy())
    return total
'''

