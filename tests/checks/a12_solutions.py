"""Answers to assignment 12 (by solution cell id): other correct ones, and the typical
mistakes. Plain Python: no framework."""

CORRECT = {
    # every row of the notebook's table, summed (the statistics included)
    "by_table": {"activation_bytes": '''
def activation_bytes(s, b, h, a, bytes_per_value=2, selective=False):
    w, sbh, scores = bytes_per_value, s * b * h, a * s * s * b
    kept = {
        "ln1 input": w * sbh, "qkv input": w * sbh, "q and k": 2 * w * sbh,
        "softmax output": w * scores, "score dropout mask": scores,
        "dropout output": w * scores, "v": w * sbh, "projection input": w * sbh,
        "attention dropout mask": sbh, "ln2 input": w * sbh, "fc1 input": w * sbh,
        "gelu input": 4 * w * sbh, "fc2 input": 4 * w * sbh, "mlp dropout mask": sbh,
        "layernorm statistics": 2 * 2 * s * b * w,
    }
    if selective:
        for k in ("softmax output", "score dropout mask", "dropout output"):
            del kept[k]
    return sum(kept.values())
'''},
    # the paper's formula in 16-bit (a float, no statistics), the same terms otherwise
    "paper_formula": {"activation_bytes": '''
def activation_bytes(s, b, h, a, bytes_per_value=2, selective=False):
    if bytes_per_value == 2:
        return s * b * h * (34 + (0 if selective else 5 * a * s / h))
    values = 16 * s * b * h + (0 if selective else 2 * a * s * s * b)
    masks = 2 * s * b * h + (0 if selective else a * s * s * b)
    return values * bytes_per_value + masks
'''},
}

WRONG = {
    "no_scores": ({"activation_bytes": '''
def activation_bytes(s, b, h, a, bytes_per_value=2, selective=False):
    return s * b * h * (16 * bytes_per_value + 2)
'''}, 2, "the attention scores are kept too"),
    "square_h": ({"activation_bytes": '''
def activation_bytes(s, b, h, a, bytes_per_value=2, selective=False):
    w = bytes_per_value
    return s * b * h * (16 * w + 2) + (0 if selective else a * h * h * b * (2 * w + 1))
'''}, 2, "not a x h^2 x b"),
    "elements": ({"activation_bytes": '''
def activation_bytes(s, b, h, a, bytes_per_value=2, selective=False):
    return s * b * h * 17 + (0 if selective else a * s * s * b * 2.5)
'''}, 0, "bytes, not elements"),
    "mask_width": ({"activation_bytes": '''
def activation_bytes(s, b, h, a, bytes_per_value=2, selective=False):
    w = bytes_per_value
    return s * b * h * 18 * w + (0 if selective else a * s * s * b * 3 * w)
'''}, 0, "1 byte per element"),
    "fixed_width": ({"activation_bytes": '''
def activation_bytes(s, b, h, a, bytes_per_value=2, selective=False):
    return 34 * s * b * h + (0 if selective else 5 * a * s * s * b)
'''}, 4, "use bytes_per_value"),
    "selective_ignored": ({"activation_bytes": '''
def activation_bytes(s, b, h, a, bytes_per_value=2, selective=False):
    w = bytes_per_value
    return s * b * h * (16 * w + 2) + a * s * s * b * (2 * w + 1)
'''}, 2, "must change with selective=True"),
    "selective_drops_qkv": ({"activation_bytes": '''
def activation_bytes(s, b, h, a, bytes_per_value=2, selective=False):
    w = bytes_per_value
    if selective:
        return s * b * h * (13 * w + 2)
    return s * b * h * (16 * w + 2) + a * s * s * b * (2 * w + 1)
'''}, 2, "keeps the attention core's inputs"),
}
