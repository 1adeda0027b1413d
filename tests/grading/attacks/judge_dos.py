"""Attacks on the judge itself (issue 15, item 4): answer cells that make the student's kernel
send the judge what costs it time, memory or threads. Each is the body of an a1 answer cell
(``time_work``); :data:`PAYLOADS` maps its name to ``(code, where the judge stops it, what
the judged test cell's output says)``. Used by ``tests/grading/test_attacks.py`` and
``bench/judge_attacks.py``."""

# a kernel whose channel answers the judge's first request with ``reply`` (raw bytes)
RAW_REPLY = """import struct as _st
import grader.grading.judge.channel as _r
def _evil(self, msg):{reply}
_r.Channel._serve_one = _evil
"""

HEAD = 'FRAMEWORK = "torch"\n\n\ndef time_work(torch, clock, fn, *args, warmup=1, repeats=3):\n'
WRONG_TIME = HEAD + "    return 0.02\n"


def collision_reply(keys: int = 50_000) -> str:
    """``keys`` integers that all hash to 0 (multiples of 2**61 - 1), as a dict's keys:
    quadratic time to build, in C."""
    return RAW_REPLY.format(reply=f"""
    P = 2**61 - 1
    self._send({{"k": "rep", "id": "k0", "to": msg["id"], "ok": True, "back": [],
                "v": {{"d": [[{{"i": str(k * P)}}, 0] for k in range(1, {keys + 1})], "n": 0}}}}, [])""")


THREAD_FLOOD = HEAD + """    import threading
    errors, go = [], threading.Barrier(2000)
    def hit():
        go.wait()
        try:
            clock()
        except Exception as e:
            errors.append(e)
    threads = [threading.Thread(target=hit) for _ in range(2000)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return 0.02
"""

PAYLOADS: dict[str, tuple[str, str, str | None]] = {
    "hash_collision_reply": (WRONG_TIME + collision_reply(),
                             "wire: distinct values sharing one hash", "share one hash"),
    "deep_json_reply": (WRONG_TIME + RAW_REPLY.format(reply="""
    head = (b'{"k":"rep","id":"k0","to":"' + msg["id"].encode() + b'","ok":true,"back":[],"v":'
            + b"[" * 200_000 + b"]" * 200_000 + b"}")
    self.sock.sendall(_st.pack("!IQ", 0, len(head)) + head)"""),
                        "wire: nesting (in the JSON)", "nested too deeply"),
    "huge_header_reply": (WRONG_TIME + RAW_REPLY.format(reply="""
    self.sock.sendall(_st.pack("!IQ", 0, 2**30))      # 'a 1 GiB header follows'"""),
                          "wire: header size, refused before it is read", "message too large"),
    "many_values_reply": (WRONG_TIME + RAW_REPLY.format(reply="""
    self._send({"k": "rep", "id": "k0", "to": msg["id"], "ok": True, "back": [],
                "v": {"l": [0] * 2_000_000, "n": 0}}, [])"""),
                          "wire: values per message", "message too large"),
    # 2,000 kernel threads calling the judge's clock at once: at most MAX_CALL_THREADS run in
    # the judge (the others fail at once; tests/grading/judge/test_channel.py counts them)
    "thread_flood": (THREAD_FLOOD, "channel: at most MAX_CALL_THREADS judge threads", None),
}
