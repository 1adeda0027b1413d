"""A grading kernel's entry point: ``python -m grader.grading.sandbox.ipkernel -f CONNECTION``.

What :func:`grader.grading.sandbox.kernel.bwrap_command` runs, last, inside the sandbox, in
place of ``python -m ipykernel_launcher``, and the same thing with one part left out: the
debugger. ipykernel imports ``debugpy`` at start-up whenever it is installed (0.1 s of CPU of
the 0.6-0.9 s a grading kernel costs in all, measured with ``-X importtime`` and
``bench/grading_cpu.py``), and a kernel that nbgrader drives never receives a debug request.
Marking ``debugpy`` as not importable is ipykernel's own "no debugger here" path
(``ipykernel.debugger._is_debugpy_available`` is then false); in the student's code
``import debugpy`` raises ``ImportError``.

Otherwise it does what ``ipykernel_launcher`` does: the working directory (the student's
folder, which ``-m`` puts first on ``sys.path``) is taken off the path while ipykernel
loads, and IPython puts it back (as ``''``, after the standard library) before the first
cell, so that a student's helper module next to the notebook imports as it does under
plain nbgrader.

One more difference: the kernel does not make its sockets. The launcher made them, listening,
in a folder the kernel cannot write, and passes them as open descriptors
(``$COURSE_KERNEL_SOCKETS``: ``{path: fd}``, :func:`grader.grading.sandbox.kernel.listen`);
:func:`use_given_sockets` has ZeroMQ take the descriptor (``ZMQ_USE_FD``) when ipykernel
binds that path. A bind to any other ``ipc`` path goes to ZeroMQ as usual (and fails in the
read-only socket folder).
"""
from __future__ import annotations

import os
import sys

SOCKETS_ENV = "COURSE_KERNEL_SOCKETS"   # as in sandbox/kernel.py


def use_given_sockets(environ=os.environ) -> dict[str, int]:
    """Have ``zmq.Socket.bind("ipc://<path>")`` use the descriptor the launcher passed for
    ``<path>``, once each; ZeroMQ's own ``bind`` is put back when all are used. Returns the
    ``{address: fd}`` still to be used."""
    import json

    spec = environ.pop(SOCKETS_ENV, "")
    if not spec:
        return {}
    import zmq

    given = {f"ipc://{path}": int(fd) for path, fd in json.loads(spec).items()}
    bind = zmq.Socket.bind

    def bind_given(self, addr):
        fd = given.pop(addr, None)
        if fd is not None:
            self.setsockopt(zmq.USE_FD, fd)
        if not given:
            zmq.Socket.bind = bind
        return bind(self, addr)

    zmq.Socket.bind = bind_given
    return given


def main() -> None:
    if sys.path and (sys.path[0] == "" or os.path.abspath(sys.path[0]) == os.getcwd()):
        del sys.path[0]
    sys.modules["debugpy"] = None   # type: ignore[assignment]  (an import of it fails)
    use_given_sockets()
    from ipykernel import kernelapp

    kernelapp.launch_new_instance()


if __name__ == "__main__":
    main()
