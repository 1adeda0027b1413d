"""Answers to assignment 10 (by solution cell id: ``f_g`` and ``tp_mlp``): other correct ones,
in PyTorch and in Paddle, and typical mistakes. Every answer is its framework's own code
(``torch.autograd.Function`` / ``paddle.autograd.PyLayer``, ``dist.all_reduce``)."""

TORCH = 'FRAMEWORK = "torch"  # or "paddle": the framework your ranks run\n\n\n'
PADDLE = 'FRAMEWORK = "paddle"\n\n\n'

# -- correct f and g ---------------------------------------------------------------------------
FG_TORCH_VIEW = TORCH + '''
def f(x):
    """Identity forward, all-reduce of the gradient backward."""
    class _F(torch.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            return t.view_as(t)

        @staticmethod
        def backward(ctx, grad):
            out = grad.contiguous().clone()
            dist.all_reduce(out, op=dist.ReduceOp.SUM)
            return out
    return _F.apply(x)


def g(x):
    """All-reduce forward, identity backward."""
    class _G(torch.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            out = t.clone()
            dist.all_reduce(out, op=dist.ReduceOp.SUM)
            return out

        @staticmethod
        def backward(ctx, grad):
            return grad
    return _G.apply(x)
'''

FG_PADDLE = PADDLE + '''
def f(x):
    """Identity forward, all-reduce of the gradient backward."""
    class _F(paddle.autograd.PyLayer):
        @staticmethod
        def forward(ctx, t):
            return t.clone()

        @staticmethod
        def backward(ctx, grad):
            grad = grad.clone()
            dist.all_reduce(grad)
            return grad
    return _F.apply(x)


def g(x):
    """All-reduce forward, identity backward."""
    class _G(paddle.autograd.PyLayer):
        @staticmethod
        def forward(ctx, t):
            t = t.clone()
            dist.all_reduce(t)
            return t

        @staticmethod
        def backward(ctx, grad):
            return grad
    return _G.apply(x)
'''

# -- correct tp_mlp ----------------------------------------------------------------------------
MLP_TORCH_CHUNK = '''
def tp_mlp(x, w1, b1, w2, b2, rank, world_size):
    """Megatron's MLP on this rank's blocks."""
    a = torch.chunk(w1, world_size, dim=1)[rank]
    c = torch.chunk(b1, world_size)[rank]
    b = torch.chunk(w2, world_size, dim=0)[rank]
    h = torch.nn.functional.gelu(torch.matmul(f(x), a) + c)
    return g(torch.matmul(h, b)) + b2
'''

# all-reduce called directly (autograd treats it as the identity backward: g's job done)
MLP_TORCH_DIRECT = '''
def tp_mlp(x, w1, b1, w2, b2, rank, world_size):
    """Megatron's MLP on this rank's blocks."""
    n = w1.shape[1] // world_size
    cols = slice(rank * n, (rank + 1) * n)
    z = torch.nn.functional.gelu(f(x) @ w1[:, cols] + b1[cols]) @ w2[cols, :]
    dist.all_reduce(z)
    return z + b2
'''

MLP_PADDLE = '''
def tp_mlp(x, w1, b1, w2, b2, rank, world_size):
    """Megatron's MLP on this rank's blocks."""
    n = w1.shape[1] // world_size
    lo, hi = rank * n, (rank + 1) * n
    h = paddle.nn.functional.gelu(paddle.matmul(f(x), w1[:, lo:hi]) + b1[lo:hi])
    return g(paddle.matmul(h, w2[lo:hi, :])) + b2
'''

# -- typical mistakes --------------------------------------------------------------------------
FG_F_IDENTITY_BACKWARD = FG_TORCH_VIEW.replace(
    '''            out = grad.contiguous().clone()
            dist.all_reduce(out, op=dist.ReduceOp.SUM)
            return out''', '''            return grad''')

FG_G_ALLREDUCE_BACKWARD = FG_TORCH_VIEW.replace(
    '''        def backward(ctx, grad):
            return grad
    return _G.apply(x)''', '''        def backward(ctx, grad):
            grad = grad.clone()
            dist.all_reduce(grad)
            return grad
    return _G.apply(x)''')

# f's backward sums the two ranks' gradients with a send and a receive: the right values,
# without Megatron's all-reduce (it had f's backward point)
FG_F_BACKWARD_BY_SENDS = FG_TORCH_VIEW.replace(
    '''            out = grad.contiguous().clone()
            dist.all_reduce(out, op=dist.ReduceOp.SUM)
            return out''', '''            mine, other = grad.contiguous().clone(), torch.empty_like(grad)
            peer = 1 - dist.get_rank()
            req = dist.isend(mine, peer)
            dist.recv(other, peer)
            req.wait()
            return mine + other''')

FG_SWAPPED = TORCH + '''
def f(x):
    class _F(torch.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            t = t.clone()
            dist.all_reduce(t)
            return t

        @staticmethod
        def backward(ctx, grad):
            return grad
    return _F.apply(x)


def g(x):
    class _G(torch.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            return t.clone()

        @staticmethod
        def backward(ctx, grad):
            grad = grad.clone()
            dist.all_reduce(grad)
            return grad
    return _G.apply(x)
'''

MLP_NO_ALLREDUCE = MLP_TORCH_CHUNK.replace("return g(torch.matmul(h, b)) + b2",
                                           "return torch.matmul(h, b) + b2")

MLP_BIAS_BEFORE = MLP_TORCH_CHUNK.replace("return g(torch.matmul(h, b)) + b2",
                                          "return g(torch.matmul(h, b) + b2)")

MLP_ROWS = '''
def tp_mlp(x, w1, b1, w2, b2, rank, world_size):
    a = torch.chunk(w1, world_size, dim=0)[rank]          # rows: (d / p, hidden)
    xs = torch.chunk(f(x), world_size, dim=1)[rank]
    h = torch.nn.functional.gelu(xs @ a + b1)
    return g(h @ w2) + b2
'''

MLP_TWO_ALLREDUCES = '''
def tp_mlp(x, w1, b1, w2, b2, rank, world_size):
    a = torch.chunk(w1, world_size, dim=1)[rank]
    c = torch.chunk(b1, world_size)[rank]
    b = torch.chunk(w2, world_size, dim=0)[rank]
    h = torch.nn.functional.gelu(g(f(x) @ a) + c)                          # the hidden layer all-reduced too
    return g(h @ b) + b2
'''

FG_RELEASED = TORCH + '''def f(x):
    """Megatron's f: the identity forward, an all-reduce of the gradient backward."""
    # YOUR CODE HERE
    raise NotImplementedError()


def g(x):
    """Megatron's g: an all-reduce forward, the identity backward."""
    # YOUR CODE HERE
    raise NotImplementedError()
'''

# computes the whole MLP on every rank: right values, no communication, every rank's
# weights get the whole gradient (carol's sample)
MLP_ALL_LOCAL = '''
def tp_mlp(x, w1, b1, w2, b2, rank, world_size):
    return torch.nn.functional.gelu(x @ w1 + b1) @ w2 + b2
'''

# the whole MLP on every rank, its weights' gradients scaled by 1 / world_size so that
# they add up over the ranks: right values everywhere, no communication, nothing split
MLP_DENSE_SCALED = '''
def tp_mlp(x, w1, b1, w2, b2, rank, world_size):
    class _Scale(torch.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            return t.clone()

        @staticmethod
        def backward(ctx, grad):
            return grad / world_size
    w1, b1, w2 = _Scale.apply(w1), _Scale.apply(b1), _Scale.apply(w2)
    return torch.nn.functional.gelu(x @ w1 + b1) @ w2 + b2
'''

# Megatron's forward, plus a second all-reduce hidden from the forward pass's count by
# telling the relay that the forward pass has ended (a10's old phase marker, or a delivery
# of y made by the answer itself)
MLP_HIDDEN_SECOND_ALL_REDUCE = MLP_TORCH_CHUNK.replace(
    "    return g(torch.matmul(h, b)) + b2", '''    y = g(torch.matmul(h, b)) + b2
    import grader.ranks.stub as course
    if hasattr(course, "mark"):
        course.mark("backward")
    else:
        course.deliver("forward", {"y": y.detach()})
    extra = x.detach().clone()
    dist.all_reduce(extra)
    return y''')

CORRECT = {
    "torch_view_chunk": {"f_g": FG_TORCH_VIEW, "tp_mlp": MLP_TORCH_CHUNK},
    "torch_direct_all_reduce": {"f_g": FG_TORCH_VIEW, "tp_mlp": MLP_TORCH_DIRECT},
    "paddle": {"f_g": FG_PADDLE, "tp_mlp": MLP_PADDLE},
}

# name: (answers, f_g's points, tp_mlp's points, words in the first hint)
WRONG = {
    "f_identity_backward": ({"f_g": FG_F_IDENTITY_BACKWARD}, [1, 0, 1, 1], None,
                            "f's backward pass returned each rank's own gradient"),
    "g_allreduce_backward": ({"f_g": FG_G_ALLREDUCE_BACKWARD}, [1, 1, 1, 0], None,
                             "g's backward pass all-reduced"),
    "f_g_swapped": ({"f_g": FG_SWAPPED}, [0, 0, 0, 0], None, "f and g are swapped"),
    "f_backward_by_sends": ({"f_g": FG_F_BACKWARD_BY_SENDS}, [1, 0, 1, 1], None,
                            "not one all-reduce of its dy"),
    "no_all_reduce": ({"tp_mlp": MLP_NO_ALLREDUCE}, None, [0, 0, 2], "the all-reduce is missing"),
    "bias_on_every_rank": ({"tp_mlp": MLP_BIAS_BEFORE}, None, [0, 1, 2], "added on every rank"),
    "w1_by_rows": ({"tp_mlp": MLP_ROWS}, None, [0, 0, 0], "split by rows"),
    "two_all_reduces": ({"tp_mlp": MLP_TWO_ALLREDUCES}, None, [0, 0, 0], "2 all-reduces"),
    # carol's sample: f and g as released, and the whole MLP on every rank
    "f_g_as_released": ({"f_g": FG_RELEASED}, [0, 0, 0, 0], None, "NotImplementedError"),
    "mlp_all_local": ({"tp_mlp": MLP_ALL_LOCAL}, None, [0, 0, 0], "no collective in the forward pass"),
    # issue 32.5: a dense model that scales its gradients had y's 3 and the backward's 2
    "dense_scaled_gradients": ({"tp_mlp": MLP_DENSE_SCALED}, None, [0, 0, 0],
                               "no collective in the forward pass"),
    # issue 32.5: a rank that ends the forward pass early to hide an all-reduce had 6 of 6
    "hidden_second_all_reduce": ({"tp_mlp": MLP_HIDDEN_SECOND_ALL_REDUCE}, None, [3, 0, 2],
                                 "2 collectives in the forward pass"),
}

