"""Answers to assignment 13 (by solution cell id): other correct ones, in PyTorch's and
Paddle's words, and the typical mistakes. The answers are data (a layout and four numbers);
the grader builds every layout itself."""
from .notebooks import reference

_REF = reference("a13_composed_layout")


def _predict(old: str, new: str, framework: str = "torch") -> str:
    """The reference ``predict_memory`` cell with one line changed."""
    src = _REF["predict_memory"]
    assert old in src, old
    src = src.replace(old, new)
    return src.replace('FRAMEWORK = "torch"', f'FRAMEWORK = "{framework}"')


def _choose(old: str, new: str) -> str:
    src = _REF["choose_layout"]
    assert old in src, old
    return src.replace(old, new)


_PADDLE_KEYS = '("dp_degree", "sharding_degree", "mp_degree", "pp_degree")'
_TORCH_KEYS = '("dp_replicate", "dp_shard", "tp", "pp")'
_PADDLE_DICT = '{"dp_degree": r, "sharding_degree": s, "mp_degree": t, "pp_degree": p}'
_TORCH_DICT = '{"dp_replicate": r, "dp_shard": s, "tp": t, "pp": p}'

CORRECT = {
    # fleet's hybrid_configs words, both ways
    "paddle": {"predict_memory": _predict(_TORCH_KEYS, _PADDLE_KEYS, "paddle"),
               "choose_layout": _choose(_TORCH_DICT, _PADDLE_DICT)},
    # the chapter's "RxSxTxP" text for the chosen layout, and every small term counted
    "text_and_exact": {
        "predict_memory": _predict(
            "            \"activations\": in_flight * rows * S * per_token}",
            "            \"activations\": in_flight * (rows * S * (per_token"
            " + (8 if stage == 0 else 0) + (16 if stage == p - 1 else 0))"
            " + blocks * S * S + (4 if stage == p - 1 else 0))}"),
        "choose_layout": _choose("    return best[1] if best else None",
                                 "    if best is None:\n        return None\n"
                                 "    d = best[1]\n"
                                 "    return f\"{d['dp_replicate']}x{d['dp_shard']}x{d['tp']}"
                                 "x{d['pp']}\""),
    },
}

WRONG = {
    # Adam's moments counted once: the optimizer part only
    "one_moment": ({"predict_memory": _predict('"optimizer": 2 * params', '"optimizer": params')},
                   5, None, "two moments"),
    "no_optimizer": ({"predict_memory": _predict('"optimizer": 2 * params', '"optimizer": 0')},
                     5, None, "twice the parameters"),
    # the gradients kept whole under FSDP
    "grads_whole": ({"predict_memory": _predict('"grads": params', '"grads": 4 * values')},
                    5, None, "reduce-scatters the gradients"),
    # HSDP sharded over every data-parallel rank
    "shard_over_replicate": ({"predict_memory": _predict("params = 4 * values / s",
                                                         "params = 4 * values / (r * s)")},
                             2, None, "HSDP shards over dp_shard only"),
    # tensor parallelism splitting the LayerNorms and row biases too
    "tp_splits_all": ({"predict_memory": _predict(
        "values = blocks * ((12 * W * W + 4 * W) / t + 6 * W)",
        "values = blocks * (12 * W * W + 10 * W) / t")}, 2, None, "stay whole"),
    # GPipe's micro-batches in flight instead of 1F1B's
    "gpipe": ({"predict_memory": _predict("in_flight = min(p - stage, m) if p > 1 else 1",
                                          "in_flight = m")}, 4, None, "1F1B keeps"),
    # every activation split by tp
    "act_tp_all": ({"predict_memory": _predict("(4 * (4 * W + (4 * W + a * S + 8 * W) / t) + 16)",
                                               "(4 * (4 * W + 4 * W + a * S + 8 * W) / t + 16)")},
                   4, None, "whole on every tensor-parallel rank"),
    # the head's and the loss's activations forgotten
    "no_head": ({"predict_memory": _predict("        per_token += 4 * (2 * W + V)",
                                            "        per_token += 0")},
                4, None, "log-softmax"),
    # values, not bytes
    "elements": ({"predict_memory": _predict("params = 4 * values / s",
                                             "params = values / s").replace(
        "in_flight * rows * S * per_token", "in_flight * rows * S * per_token / 4")},
                 0, None, "bytes, not values"),
    # the layout with the least memory, whatever it communicates
    "least_memory": ({"choose_layout": _choose("key = (communication(r, s, t, p), r, s, t, p)",
                                               "key = (peak, r, s, t, p)")},
                     6, 3, "fewest bytes"),
    # the least communication, whatever the budget
    "ignores_budget": ({"choose_layout": _choose("if peak <= budget_bytes:", "if True:")},
                       6, 1, "over the budget"),
    # tensor parallelism over more ranks than heads
    "tp_over_heads": ({"choose_layout": '''
def choose_layout(model, ranks, budget_bytes):
    return {"dp_replicate": 1, "dp_shard": 1, "tp": ranks, "pp": 1}
'''}, 6, 0, "tp must divide the heads"),
}
