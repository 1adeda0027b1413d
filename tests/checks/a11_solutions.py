"""Answers to assignment 11 (by solution cell id): other correct ones, in PyTorch and in
Paddle, and typical mistakes. Every answer is tensor code of its framework that runs on a
CPU or a GPU."""

TORCH = 'FRAMEWORK = "torch"\nimport torch\n\n\n'
PADDLE = 'FRAMEWORK = "paddle"\nimport paddle\n\n\n'

# -- correct merges ------------------------------------------------------------------------
MERGE_LOGADDEXP = TORCH + '''
def merge(o1, lse1, o2, lse2):
    lse = torch.logaddexp(lse1, lse2)           # -inf and -inf give -inf
    w1 = torch.exp(lse1 - lse).nan_to_num(0.0)  # -inf - -inf is NaN: no key, weight 0
    w2 = torch.exp(lse2 - lse).nan_to_num(0.0)
    return w1.unsqueeze(1) * o1 + w2.unsqueeze(1) * o2, lse
'''

MERGE_PADDLE = PADDLE + '''
def merge(o1, lse1, o2, lse2):
    m = paddle.maximum(lse1, lse2)
    m = paddle.where(paddle.isinf(m), paddle.zeros_like(m), m)
    w1 = paddle.exp(lse1 - m)
    w2 = paddle.exp(lse2 - m)
    total = w1 + w2
    o = (w1.unsqueeze(1) * o1 + w2.unsqueeze(1) * o2) / paddle.clip(total, min=1e-30).unsqueeze(1)
    return o, m + paddle.log(total)
'''

# -- correct ring attentions ---------------------------------------------------------------
RING_SOFTMAX = '''
def ring_attention(q, k_blocks, v_blocks, masks=None, merge=merge):
    o = lse = None
    for i, (k, v) in enumerate(zip(k_blocks, v_blocks)):
        s = torch.matmul(q, k.transpose(0, 1)) * q.shape[-1] ** -0.5
        if masks is not None:
            s = torch.where(masks[i], s, torch.tensor(float("-inf")))
        p = torch.softmax(s, dim=-1).nan_to_num(0.0)     # all masked: NaN -> 0
        part = (p @ v, torch.logsumexp(s, dim=-1))
        o, lse = part if o is None else merge(o, lse, *part)
    return o, lse
'''

# flash-attention style: running max, running sum and an unnormalised output, one block at
# a time but merged by hand, not with merge: the task folds each block in with the merge it
# is given (the grader's records each call), so this is graded as not following the method
RING_FLASH = '''
def ring_attention(q, k_blocks, v_blocks, masks=None, merge=merge):
    import math
    n = q.shape[0]
    run_max = torch.full((n, 1), -math.inf)
    run_sum = torch.zeros(n, 1)
    acc = torch.zeros(n, v_blocks[0].shape[1])
    for i in range(len(k_blocks)):
        s = q @ k_blocks[i].T / math.sqrt(q.shape[1])
        if masks is not None:
            s[~masks[i]] = -math.inf
        new_max = torch.maximum(run_max, s.max(dim=1, keepdim=True).values)
        safe = torch.where(torch.isinf(new_max), torch.zeros_like(new_max), new_max)
        scale = torch.exp(run_max - safe)
        p = torch.exp(s - safe)
        run_sum = run_sum * scale + p.sum(dim=1, keepdim=True)
        acc = acc * scale + p @ v_blocks[i]
        run_max = new_max
    o = acc / torch.where(run_sum > 0, run_sum, torch.ones_like(run_sum))
    lse = (torch.where(torch.isinf(run_max), torch.zeros_like(run_max), run_max)
           + torch.log(run_sum)).squeeze(1)
    return o, lse
'''

RING_PADDLE = '''
def ring_attention(q, k_blocks, v_blocks, masks=None, merge=merge):
    n, d = q.shape
    o = paddle.zeros([n, v_blocks[0].shape[1]])
    lse = paddle.full([n], float("-inf"))
    for i in range(len(k_blocks)):
        s = paddle.matmul(q, k_blocks[i], transpose_y=True) / d ** 0.5
        if masks is not None:
            s = paddle.where(masks[i], s, paddle.full_like(s, float("-inf")))
        m = s.max(axis=1, keepdim=True)
        m = paddle.where(paddle.isinf(m), paddle.zeros_like(m), m)
        p = paddle.exp(s - m)
        total = p.sum(axis=1)
        part_o = paddle.matmul(p, v_blocks[i]) / paddle.clip(total, min=1e-30).unsqueeze(1)
        o, lse = merge(o, lse, part_o, m.squeeze(1) + paddle.log(total))
    return o, lse
'''

CORRECT = {
    "torch_logaddexp_softmax": {"merge": MERGE_LOGADDEXP, "ring_attention": RING_SOFTMAX},
    "paddle_by_hand": {"merge": MERGE_PADDLE, "ring_attention": RING_PADDLE},
}

# -- typical mistakes ----------------------------------------------------------------------
MERGE_AVERAGE = TORCH + '''
def merge(o1, lse1, o2, lse2):
    return (o1 + o2) / 2, torch.logaddexp(lse1, lse2)
'''

MERGE_NO_MAX = TORCH + '''
def merge(o1, lse1, o2, lse2):
    w1, w2 = torch.exp(lse1), torch.exp(lse2)
    total = w1 + w2
    o = (w1[:, None] * o1 + w2[:, None] * o2) / total[:, None]
    return o, torch.log(total)
'''

MERGE_NAN_MASKED = TORCH + '''
def merge(o1, lse1, o2, lse2):
    m = torch.maximum(lse1, lse2)
    w1, w2 = torch.exp(lse1 - m), torch.exp(lse2 - m)
    total = w1 + w2
    o = (w1[:, None] * o1 + w2[:, None] * o2) / total[:, None]
    return o, m + torch.log(total)
'''

MERGE_LSE_MAX = TORCH + '''
def merge(o1, lse1, o2, lse2):
    m = torch.maximum(lse1, lse2)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    w1, w2 = torch.exp(lse1 - m), torch.exp(lse2 - m)
    total = w1 + w2
    safe = torch.where(total > 0, total, torch.ones_like(total))
    o = (w1[:, None] * o1 + w2[:, None] * o2) / safe[:, None]
    return o, torch.maximum(lse1, lse2)
'''

RING_NO_SCALE = '''
def ring_attention(q, k_blocks, v_blocks, masks=None, merge=merge):
    o = lse = None
    for i, (k, v) in enumerate(zip(k_blocks, v_blocks)):
        s = q @ k.T
        if masks is not None:
            s = s.masked_fill(~masks[i], float("-inf"))
        part = (torch.softmax(s, dim=1).nan_to_num(0.0) @ v, torch.logsumexp(s, dim=1))
        o, lse = part if o is None else merge(o, lse, *part)
    return o, lse
'''

RING_IGNORE_MASK = '''
def ring_attention(q, k_blocks, v_blocks, masks=None, merge=merge):
    o = lse = None
    for k, v in zip(k_blocks, v_blocks):
        s = q @ k.T / q.shape[1] ** 0.5
        part = (torch.softmax(s, dim=1) @ v, torch.logsumexp(s, dim=1))
        o, lse = part if o is None else merge(o, lse, *part)
    return o, lse
'''

RING_MASK_ZERO = '''
def ring_attention(q, k_blocks, v_blocks, masks=None, merge=merge):
    o = lse = None
    for i, (k, v) in enumerate(zip(k_blocks, v_blocks)):
        s = q @ k.T / q.shape[1] ** 0.5
        if masks is not None:
            s = s * masks[i]                     # masked-out scores become 0
        part = (torch.softmax(s, dim=1) @ v, torch.logsumexp(s, dim=1))
        o, lse = part if o is None else merge(o, lse, *part)
    return o, lse
'''

RING_INIT_ZERO = '''
def ring_attention(q, k_blocks, v_blocks, masks=None, merge=merge):
    n, d = q.shape
    o, lse = torch.zeros(n, v_blocks[0].shape[1]), torch.zeros(n)
    for i, (k, v) in enumerate(zip(k_blocks, v_blocks)):
        s = q @ k.T / d ** 0.5
        if masks is not None:
            s = s.masked_fill(~masks[i], float("-inf"))
        part = (torch.softmax(s, dim=1).nan_to_num(0.0) @ v, torch.logsumexp(s, dim=1))
        o, lse = merge(o, lse, *part)
    return o, lse
'''

RING_NO_MAX = '''
def ring_attention(q, k_blocks, v_blocks, masks=None, merge=merge):
    o = lse = None
    for i, (k, v) in enumerate(zip(k_blocks, v_blocks)):
        e = torch.exp(q @ k.T / q.shape[1] ** 0.5)
        if masks is not None:
            e = e * masks[i]
        total = e.sum(dim=1)
        part = ((e @ v) / torch.where(total > 0, total, torch.ones_like(total))[:, None],
                torch.log(total))
        o, lse = part if o is None else merge(o, lse, *part)
    return o, lse
'''

RING_SOFTMAX_NAN = '''
def ring_attention(q, k_blocks, v_blocks, masks=None, merge=merge):
    o = lse = None
    for i, (k, v) in enumerate(zip(k_blocks, v_blocks)):
        s = q @ k.T / q.shape[1] ** 0.5
        if masks is not None:
            s = s.masked_fill(~masks[i], float("-inf"))
        part = (torch.softmax(s, dim=1) @ v, torch.logsumexp(s, dim=1))   # NaN rows
        o, lse = part if o is None else merge(o, lse, *part)
    return o, lse
'''

# Paddle's logsumexp gives NaN (not -inf) for a row that is all -inf
RING_PADDLE_LOGSUMEXP = '''
def ring_attention(q, k_blocks, v_blocks, masks=None, merge=merge):
    n, d = q.shape
    o = paddle.zeros([n, v_blocks[0].shape[1]])
    lse = paddle.full([n], float("-inf"))
    for i in range(len(k_blocks)):
        s = paddle.matmul(q, k_blocks[i], transpose_y=True) / d ** 0.5
        if masks is not None:
            s = paddle.where(masks[i], s, paddle.full_like(s, float("-inf")))
        part_lse = paddle.logsumexp(s, axis=1)
        part_o = paddle.matmul(paddle.nn.functional.softmax(s, axis=1), v_blocks[i])
        o, lse = merge(o, lse, part_o, part_lse)
    return o, lse
'''

# issue 37.2: every block concatenated, one ordinary softmax: no ring, no merge (it had the
# ring check's 6 points)
RING_CONCAT = '''
def ring_attention(q, k_blocks, v_blocks, masks=None, merge=merge):
    k, v = torch.cat(list(k_blocks)), torch.cat(list(v_blocks))
    s = q @ k.T / q.shape[1] ** 0.5
    if masks is not None:
        s = s.masked_fill(~torch.cat(list(masks), dim=1), float("-inf"))
    lse = torch.logsumexp(s, dim=1)
    p = torch.softmax(s, dim=1).nan_to_num(0.0)
    return p @ v, lse
'''

# issue 37.2: a ring that merges block after block, as asked, but computes the whole score
# matrix once beside it (here for each row's largest score, never used): right numbers and
# the merges a ring makes, and the memory the ring exists to avoid
RING_WHOLE_SCORES = '''
def ring_attention(q, k_blocks, v_blocks, masks=None, merge=merge):
    top = (q @ torch.cat(list(k_blocks)).T).max(dim=1).values   # every score at once
    o = lse = None
    for i, (k, v) in enumerate(zip(k_blocks, v_blocks)):
        s = torch.matmul(q, k.transpose(0, 1)) * q.shape[-1] ** -0.5
        if masks is not None:
            s = torch.where(masks[i], s, torch.tensor(float("-inf")))
        p = torch.softmax(s, dim=-1).nan_to_num(0.0)
        part = (p @ v, torch.logsumexp(s, dim=-1))
        o, lse = part if o is None else merge(o, lse, *part)
    return o, lse
'''

RING_PADDLE_WHOLE_SCORES = RING_PADDLE.replace(
    "    n, d = q.shape\n",
    "    n, d = q.shape\n"
    "    top = paddle.matmul(q, paddle.concat(list(k_blocks)), transpose_y=True).max(axis=1)\n")

# (answers, merge points, ring points, words in the first hint)
WRONG = {
    # a wrong merge costs task 1 only: ring_attention is graded with the grader's merge
    "merge_average": ({"merge": MERGE_AVERAGE}, 1, 6, "not averaged"),
    "merge_no_max": ({"merge": MERGE_NO_MAX}, 4, 6, "subtract the larger lse"),
    "merge_nan_masked": ({"merge": MERGE_NAN_MASKED}, 5, 6, "-inf - (-inf) is NaN"),
    "merge_lse_max": ({"merge": MERGE_LSE_MAX}, 3, 6, "not the larger of the two"),
    "ring_concatenated": ({"ring_attention": RING_CONCAT}, 6, 0, "called merge 0 times"),
    "ring_flash_without_merge": ({"ring_attention": RING_FLASH}, 6, 0, "called merge 0 times"),
    "ring_whole_score_matrix": ({"ring_attention": RING_WHOLE_SCORES}, 6, 4,
                                "more than one block's scores"),
    "ring_no_scale": ({"ring_attention": RING_NO_SCALE}, 6, 0, "1/sqrt(d)"),
    "ring_ignore_mask": ({"ring_attention": RING_IGNORE_MASK}, 6, 4, "set their scores to -inf"),
    "ring_mask_zero": ({"ring_attention": RING_MASK_ZERO}, 6, 4, "not 0"),
    "ring_init_zero": ({"ring_attention": RING_INIT_ZERO}, 6, 1, "lse = -inf"),
    "ring_no_max": ({"ring_attention": RING_NO_MAX}, 6, 5, "subtract each row's largest"),
    "ring_softmax_nan": ({"ring_attention": RING_SOFTMAX_NAN}, 6, 4, "0 / 0 is NaN"),
    "paddle_logsumexp_nan": ({"merge": MERGE_PADDLE, "ring_attention": RING_PADDLE_LOGSUMEXP},
                             6, 4, "must not give NaN"),
}
