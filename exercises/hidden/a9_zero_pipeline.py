"""Hidden checks of assignment 9 (the public ones: ``grader.checks.a9_zero_pipeline``).

Task 1 is compared with ZeRO's accounting (Rajbhandari et al.), written here with the
typical mistakes as switches, so that a wrong answer's feedback names the one it made.
Task 2's schedule is run on a clock of whole units (forward 1, backward 2): a stage runs
its passes in the given order, each as soon as the stage is free and its inputs exist
(the forward of the stage before; the backward of the stage after, and its own forward).
"""
from __future__ import annotations

from typing import Callable

from grader.checks.a9_zero_pipeline import KINDS, normalise_memory, normalise_schedule
from grader.checks.result import CheckResult
from grader.checks.support import attempt, result

__all__ = ["zero_bytes", "one_f_one_b", "unit_clock", "MEMORY_CASES", "VALUE_CASES",
           "SCHEDULE_CASES", "MISTAKES", "check_zero_bytes", "check_schedule", "check_all"]

MISTAKES = {
    "stage1_grads": "ZeRO-1 splits only the optimizer state: the gradients are still "
                    "all-reduced and held whole on every rank",
    "stage2_params": "ZeRO-2 splits the gradients and the optimizer state, not the "
                     "parameters: every rank still holds all of them",
    "stage3_whole_params": "ZeRO-3 splits the parameters too: each rank keeps 1/ranks "
                           "of them (and gathers a layer's only while it computes)",
    "no_optimizer_split": "from stage 1 on the optimizer state is split over the ranks",
    "ranks_minus_one": "each of the ranks holds one share: divide by ranks, not ranks - 1",
    "fixed_values": "use optimizer_values (2 for Adam, 1 for SGD with momentum), not a "
                    "fixed number of optimizer values per parameter",
    "fixed_bytes": "use bytes_per_value (4 for float32, 2 for bfloat16), not a fixed 4",
    "values_not_bytes": "the sizes are bytes: multiply the values by bytes_per_value",
}


def zero_bytes(n_params, ranks, stage, bytes_per_value=4, optimizer_values=2,
               mistakes=frozenset()):
    """Bytes one rank holds, by kind; with ``mistakes`` the answer each typical mistake
    gives."""
    if "fixed_values" in mistakes:
        optimizer_values = 2
    if "fixed_bytes" in mistakes:
        bytes_per_value = 4
    if "values_not_bytes" in mistakes:
        bytes_per_value = 1
    whole = n_params * bytes_per_value
    share = max(ranks - 1, 1) if "ranks_minus_one" in mistakes else ranks
    split = {
        "params": stage >= 3 and "stage3_whole_params" not in mistakes
        or (stage == 2 and "stage2_params" in mistakes),
        "grads": stage >= 2 or (stage == 1 and "stage1_grads" in mistakes),
        "optimizer": stage >= 1 and "no_optimizer_split" not in mistakes,
    }
    amount = {"params": whole, "grads": whole, "optimizer": optimizer_values * whole}
    return {k: amount[k] / share if split[k] else amount[k] for k in KINDS}


# (n_params, ranks, stage): every stage on 2, 4 and 8 ranks, one that does not divide
MEMORY_CASES = [(n, r, s) for s in range(4) for n, r in
                ((216_576, 2), (216_576, 4), (1_000_003, 8), (7_000_000_000, 8))]
# (n_params, ranks, bytes_per_value, optimizer_values), all at stage 0: the sizes alone
VALUE_CASES = [(1_000_000, 4, 2, 1), (1_000_000, 4, 2, 3), (350_000, 2, 4, 1),
               (216_576, 8, 8, 2)]


def _close(seen: dict, want: dict, bytes_per_value: float, values: float) -> bool:
    """Equal within one value of each kind (an answer may pad to whole values, as
    FSDP pads its shards, or divide exactly)."""
    slack = {"params": bytes_per_value, "grads": bytes_per_value,
             "optimizer": bytes_per_value * values}
    return all(abs(seen[k] - want[k]) <= slack[k] + 1e-9 * abs(want[k]) for k in KINDS)


def _which_mistake(fn_results: dict, cases, kwargs_of) -> str:
    for mistake, hint in MISTAKES.items():
        if all(_close(fn_results[c], zero_bytes(*c[:3], **kwargs_of(c),
                                                mistakes={mistake}),
                      kwargs_of(c).get("bytes_per_value", 4),
                      kwargs_of(c).get("optimizer_values", 2)) for c in cases):
            return hint
    return ""


def check_zero_bytes(fn: Callable) -> CheckResult:
    """5 points: stage 0, 1, 2 and 3 (1 each, float32 and Adam), and the bytes and
    optimizer values the arguments give (1)."""
    name = "a9: zero_bytes matches ZeRO's accounting"
    got, errors = {}, {}        # each call on its own: an error costs the parts it is in
    for c in MEMORY_CASES:
        got[c], errors[c] = attempt(normalise_memory, fn, *c)
    got_values = {}
    for c in VALUE_CASES:
        got_values[c], errors[c] = attempt(normalise_memory, fn, c[0], c[1], 0,
                                           bytes_per_value=c[2], optimizer_values=c[3])
    parts = []
    for stage in range(4):
        cases = [c for c in MEMORY_CASES if c[2] == stage]
        raised = [c for c in cases if errors[c]]
        if raised:
            parts.append(_raised(f"stage {stage}", f"zero_bytes{raised[0]}",
                                 zero_bytes(*raised[0]), errors[raised[0]], len(raised),
                                 len(cases)))
            continue
        wrong = [c for c in cases if not _close(got[c], zero_bytes(*c), 4, 2)]
        c = (wrong or cases)[0]
        want = zero_bytes(*c)
        parts.append((1, not wrong, f"stage {stage} is not ZeRO's",
                      f"zero_bytes{c}: " + _fmt(want), _fmt(got[c]),
                      _which_mistake(got, cases, lambda c: {})
                      or _hint_by_kind(got[c], want, stage)))
    raised = [c for c in VALUE_CASES if errors[c]]
    if raised:
        c = raised[0]
        parts.append(_raised("bytes_per_value and optimizer_values",
                             f"zero_bytes({c[0]}, {c[1]}, 0, bytes_per_value={c[2]}, "
                             f"optimizer_values={c[3]})", zero_bytes(c[0], c[1], 0, c[2], c[3]),
                             errors[c], len(raised), len(VALUE_CASES)))
    else:
        wrong = [c for c in VALUE_CASES if not _close(
            got_values[c], zero_bytes(c[0], c[1], 0, c[2], c[3]), c[2], c[3])]
        c = (wrong or VALUE_CASES)[0]
        want = zero_bytes(c[0], c[1], 0, c[2], c[3])
        by_case = {(n, r, 0, b, v): got_values[(n, r, b, v)] for n, r, b, v in VALUE_CASES}
        mistake = _which_mistake(by_case, list(by_case),
                                 lambda c: {"bytes_per_value": c[3], "optimizer_values": c[4]})
        parts.append((1, not wrong, "the sizes do not follow bytes_per_value and "
                      "optimizer_values",
                      f"zero_bytes({c[0]}, {c[1]}, 0, bytes_per_value={c[2]}, "
                      f"optimizer_values={c[3]}): " + _fmt(want),
                      _fmt(got_values[c]), mistake or "stage 0 holds n_params x "
                      "bytes_per_value for the parameters and for the gradients, and "
                      "optimizer_values times that for the optimizer"))
    return result(name, 5, parts, f"all {len(MEMORY_CASES) + len(VALUE_CASES)} cases "
                                  "match, stages 0 to 3")


def _raised(what: str, call_text: str, want: dict, why: str, n: int, of: int) -> tuple:
    """The failed part of a task-1 group whose calls raised (or returned no dict)."""
    return (1, False, f"{what}: {why}", f"{call_text}: " + _fmt(want),
            f"{n} of its {of} calls failed",
            "call zero_bytes with these arguments in a cell of your own; it returns "
            "{'params': ..., 'grads': ..., 'optimizer': ...}")


def _fmt(memory: dict) -> str:
    return ", ".join(f"{k} {memory[k]:,.0f}" for k in KINDS)


def _hint_by_kind(seen: dict, want: dict, stage: int) -> str:
    for k in KINDS:
        if abs(seen[k] - want[k]) > 1e-6 * abs(want[k]) + 8:
            return (f"at stage {stage} the {k} are "
                    f"{'split over the ranks' if want[k] < seen[k] else 'whole'}")
    return ""


# -- task 2 ------------------------------------------------------------------------
F_TIME, B_TIME = 1, 2
# (stages, micro-batches); the last has fewer micro-batches than stages - 1, where the
# warm-up must stop at the micro-batches there are
SCHEDULE_CASES = [(2, 4), (3, 6), (4, 8), (4, 4), (3, 2), (4, 2)]


def one_f_one_b(stages: int, micro: int) -> list[list[tuple[str, int]]]:
    """Stage s warms up with stages - s - 1 forwards, then alternates a forward and a
    backward, then drains the backwards (Narayanan et al.)."""
    out = []
    for s in range(stages):
        warm = min(stages - s - 1, micro)
        order = [("F", i) for i in range(warm)]
        for i in range(micro - warm):
            order += [("F", warm + i), ("B", i)]
        order += [("B", i) for i in range(micro - warm, micro)]
        out.append(order)
    return out


def unit_clock(schedule, stages: int, micro: int):
    """Run the stages' orders on the unit clock. Returns ``(makespan, in_flight)``, the
    most micro-batches each stage held between its forward and its backward, or a
    string saying why the order cannot run."""
    want = sorted([("F", i) for i in range(micro)] + [("B", i) for i in range(micro)])
    for s, ops in enumerate(schedule):
        if sorted(ops) != want:
            return (f"stage {s} does not run each forward and backward exactly once: "
                    f"{ops}")
    done: dict[tuple[str, int, int], int] = {}
    free, nxt = [0] * stages, [0] * stages
    while True:
        moved = False
        for s in range(stages):
            if nxt[s] == len(schedule[s]):
                continue
            kind, mb = schedule[s][nxt[s]]
            needs = [("F", s - 1, mb)] if kind == "F" and s > 0 else []
            if kind == "B":
                needs.append(("F", s, mb))
                if s < stages - 1:
                    needs.append(("B", s + 1, mb))
            if all(n in done for n in needs):
                start = max([free[s]] + [done[n] for n in needs])
                free[s] = done[(kind, s, mb)] = start + (F_TIME if kind == "F" else B_TIME)
                nxt[s] += 1
                moved = True
        if all(nxt[s] == len(schedule[s]) for s in range(stages)):
            break
        if not moved:
            stuck = [f"stage {s} waits to run {schedule[s][nxt[s]][0]}"
                     f"{schedule[s][nxt[s]][1]}" for s in range(stages)
                     if nxt[s] < len(schedule[s])]
            return "the stages wait for each other forever: " + "; ".join(stuck)
    in_flight = []
    for ops in schedule:
        now = most = 0
        for kind, _ in ops:
            now += 1 if kind == "F" else -1
            most = max(most, now)
        in_flight.append(most)
    return max(free), in_flight


def _broken_hint(schedule, micro: int) -> str:
    for s, ops in enumerate(schedule):
        ghost = [f"{k}{mb}" for k, mb in ops if not 0 <= mb < micro]
        if ghost:
            return (f"stage {s} runs {', '.join(ghost[:3])}, which do not exist with {micro} "
                    "micro-batches: the warm-up is min(stages - s - 1, micro) forwards, "
                    "never more than the micro-batches there are")
    return ("a stage can run the backward of a micro-batch only after its own forward and "
            "the next stage's backward of it")


def check_schedule(fn: Callable) -> CheckResult:
    """5 points: the order runs in every case (1), no stage holds more than stages - s
    micro-batches' activations (2), and the step is as short as 1F1B's (2); memory and
    time are judged on the cases whose order runs (none: 0 points)."""
    name = "a9: one_f_one_b is a 1F1B schedule"
    seen = {}
    for p, m in SCHEDULE_CASES:       # each on its own: one that raises cannot run, as below
        sched, why = attempt(lambda s, p=p: normalise_schedule(s, p), fn, p, m)
        seen[(p, m)] = (sched, unit_clock(sched, p, m)) if not why else ([], why)
    broken = {k: v for k, v in seen.items() if isinstance(v[1], str)}
    runs_part = (1, True, "", "", "", "")
    if broken:
        (p, m), (sched, why) = next(iter(broken.items()))
        failure = ("the order cannot run", "an order in which every pass's inputs exist "
                   "when it starts", f"{p} stages, {m} micro-batches: {why}",
                   _broken_hint(sched, m)) if sched else (
            f"one_f_one_b({p}, {m}): {why}", "one list of passes per stage",
            f"{sum(not v[0] for v in broken.values())} of {len(seen)} calls failed",
            f"call one_f_one_b({p}, {m}) in a cell of your own; it returns "
            "[['F0', 'F1', 'B0', ...], ...], one list per stage")
        if len(broken) == len(seen):
            return CheckResult(name, 0, 5, failure[0], expected=failure[1], seen=failure[2],
                               hint=failure[3])
        runs_part = (1, False, *failure)
    memory_fail = time_fail = None
    for (p, m), (sched, (span, in_flight)) in ((k, v) for k, v in seen.items()
                                                if k not in broken):
        bound = [min(p - s, m) for s in range(p)]
        if memory_fail is None and any(f > b for f, b in zip(in_flight, bound)):
            memory_fail = (p, m, in_flight, bound)
        best, _ = unit_clock(one_f_one_b(p, m), p, m)
        if time_fail is None and span > best:
            time_fail = (p, m, span, best)
    parts = []
    if memory_fail:
        p, m, in_flight, bound = memory_fail
        gpipe = all(f == m for f in in_flight)
        hint = ("that is GPipe: all forwards first, so every stage keeps all m "
                "micro-batches' activations; 1F1B runs a backward as soon as it can") \
            if gpipe else ("one forward too many before the first backward: stage s "
                           "warms up with stages - s - 1 forwards")
        parts.append((2, False, "a stage holds too many micro-batches' activations",
                      f"at most stages - s per stage: {bound}",
                      f"{p} stages, {m} micro-batches: {in_flight}", hint))
    else:
        parts.append((2, True, "", "", "", ""))
    if time_fail:
        p, m, span, best = time_fail
        parts.append((2, False, "the step takes longer than 1F1B's",
                      f"{best} time units ({p} stages, {m} micro-batches)",
                      f"{span} time units",
                      "without the warm-up forwards a stage waits for each micro-batch "
                      "to travel to the last stage and back before starting the next"))
    else:
        parts.append((2, True, "", "", "", ""))
    return result(name, 5, [runs_part] + parts,
                  f"{len(SCHEDULE_CASES)} pipelines run as 1F1B: memory within "
                  "stages - s micro-batches, no time lost")


def check_all(zero_bytes_fn: Callable, schedule_fn: Callable) -> list[CheckResult]:
    return [check_zero_bytes(zero_bytes_fn), check_schedule(schedule_fn)]
