"""Answers to assignment 9 for the tests: correct ones written differently from the
reference, and the typical mistakes."""
import math


# -- task 1: zero_bytes ----------------------------------------------------------------
def zero_by_table(n_params, ranks, stage, bytes_per_value=4, optimizer_values=2):
    """Correct: which kinds each stage splits, from a table."""
    splits = {0: (), 1: ("optimizer",), 2: ("optimizer", "grads"),
              3: ("optimizer", "grads", "params")}[stage]
    size = {"params": n_params * bytes_per_value, "grads": n_params * bytes_per_value,
            "optimizer": n_params * bytes_per_value * optimizer_values}
    return {k: v / ranks if k in splits else v for k, v in size.items()}


def zero_padded(n_params, ranks, stage, bytes_per_value=4, optimizer_values=2):
    """Correct: whole values per rank, the shard padded up as FSDP pads it (integers)."""
    shard = math.ceil(n_params / ranks)
    params = (shard if stage == 3 else n_params) * bytes_per_value
    grads = (shard if stage >= 2 else n_params) * bytes_per_value
    optimizer = (shard if stage >= 1 else n_params) * bytes_per_value * optimizer_values
    return dict(params=params, grads=grads, optimizer=optimizer)


def zero_stage1_splits_grads(n_params, ranks, stage, bytes_per_value=4,
                             optimizer_values=2):
    b = n_params * bytes_per_value
    return {"params": b / ranks if stage == 3 else b,
            "grads": b / ranks if stage >= 1 else b,
            "optimizer": optimizer_values * b / ranks if stage >= 1 else
            optimizer_values * b}


def zero_stage2_splits_params(n_params, ranks, stage, bytes_per_value=4,
                              optimizer_values=2):
    b = n_params * bytes_per_value
    return {"params": b / ranks if stage >= 2 else b,
            "grads": b / ranks if stage >= 2 else b,
            "optimizer": optimizer_values * b / ranks if stage >= 1 else
            optimizer_values * b}


def zero_adam_hard_coded(n_params, ranks, stage, bytes_per_value=4, optimizer_values=2):
    b = n_params * bytes_per_value
    return {"params": b / ranks if stage == 3 else b,
            "grads": b / ranks if stage >= 2 else b,
            "optimizer": 2 * b / ranks if stage >= 1 else 2 * b}


def zero_values_not_bytes(n_params, ranks, stage, bytes_per_value=4, optimizer_values=2):
    return {k: v / bytes_per_value for k, v in
            zero_by_table(n_params, ranks, stage, bytes_per_value,
                          optimizer_values).items()}


def zero_ranks_minus_one(n_params, ranks, stage, bytes_per_value=4, optimizer_values=2):
    b = n_params * bytes_per_value
    d = ranks - 1
    return {"params": b / d if stage == 3 else b, "grads": b / d if stage >= 2 else b,
            "optimizer": optimizer_values * b / d if stage >= 1 else optimizer_values * b}


def zero_wrong_keys(n_params, ranks, stage, bytes_per_value=4, optimizer_values=2):
    return {"weights": n_params * bytes_per_value}


# -- task 2: one_f_one_b ---------------------------------------------------------------
def schedule_pytorch_style(stages, micro):
    """Correct: PyTorch's Schedule1F1B loop: stages - s forwards, then backward first in
    each pair, strings."""
    out = []
    for s in range(stages):
        warm = min(stages - s, micro)
        order = [f"F{i}" for i in range(warm)]
        f, b = warm, 0
        while b < micro:
            order.append(f"B{b}")
            b += 1
            if f < micro:
                order.append(f"F{f}")
                f += 1
        out.append(order)
    return out


def schedule_greedy(stages, micro):
    """Correct: run a forward while the stage holds fewer than stages - s micro-batches
    and forwards remain, else the oldest backward (pairs, not strings)."""
    out = []
    for s in range(stages):
        order, f, b = [], 0, 0
        while b < micro:
            if f < micro and f - b < stages - s:
                order.append(("F", f))
                f += 1
            else:
                order.append(("B", b))
                b += 1
        out.append(order)
    return out


def schedule_gpipe(stages, micro):
    return [[f"F{i}" for i in range(micro)] + [f"B{i}" for i in range(micro)]
            for _ in range(stages)]


def schedule_long_warmup(stages, micro):
    """One forward too many: stages - s forwards, then forward first in each pair."""
    out = []
    for s in range(stages):
        warm = min(stages - s, micro)
        order = [("F", i) for i in range(warm)]
        for i in range(micro - warm):
            order += [("F", warm + i), ("B", i)]
        order += [("B", i) for i in range(micro - warm, micro)]
        out.append(order)
    return out


def schedule_no_warmup(stages, micro):
    return [[x for i in range(micro) for x in (f"F{i}", f"B{i}")] for _ in range(stages)]


def schedule_backward_first(stages, micro):
    return [[x for i in range(micro) for x in (f"B{i}", f"F{i}")] for _ in range(stages)]


def schedule_uncapped_warmup(stages, micro):
    """1F1B whose warm-up is not capped at the micro-batches: with fewer micro-batches than
    stages - 1 it emits forwards (and backwards) of micro-batches that do not exist."""
    out = []
    for s in range(stages):
        warm = stages - s - 1
        order = [("F", i) for i in range(warm)]
        for i in range(micro - warm):
            order += [("F", warm + i), ("B", i)]
        order += [("B", i) for i in range(micro - warm, micro)]
        out.append(order)
    return out
