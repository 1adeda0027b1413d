"""What a reader sees on each chapter page, checked on the MyST sources (no build needed).

- Each framework's tab is that framework's own API: for every page in ``API`` the cells
  tagged ``torch`` (and the PyTorch scripts the page shows) contain the PyTorch calls the
  page is about, and likewise for Paddle.
- No two sibling tabs are the same code with the framework's name changed.
- No word a reader cannot know ("seed"), no course-private helper's source on the page,
  code lines that fit the column, and the hardware line first under each title.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from grader.lab.core.gpucells import parse_page

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = ROOT / "chapters"
EXPERIMENT_PAGES = ["toolkit", "async", "multidevice", "communication", "data_parallel",
                    "auto_parallel", "sharding", "fitting", "pipeline_schedules",
                    "tensor_parallel", "context_expert", "capstone"]

# The calls each page is about, per framework: a reader of that tab must see them in a
# cell (or a script the page shows in full). Pages are added as they are rewritten in
# the frameworks' own APIs.
API: dict[str, dict[str, list[str]]] = {
    "auto_parallel": {
        "torch": ["init_device_mesh", "distribute_tensor", "Shard", "Replicate", "Partial",
                  "redistribute", "parallelize_module", "ColwiseParallel",
                  "RowwiseParallel", "torchrun"],
        "paddle": ["ProcessMesh", "shard_tensor", "reshard", "Shard", "Replicate",
                   "Partial", "shard_layer", "paddle.distributed.launch"],
    },
    "toolkit": {
        "torch": ["torch.cuda.is_available", "torch.cuda.device_count", "torch.device(",
                  "torch.accelerator", "torch.get_device_module", "device=", ".to(device)",
                  "torch.utils.benchmark", "blocked_autorange", "torch.cuda.synchronize",
                  "torch.cuda.Event(enable_timing=True)", "elapsed_time",
                  "init_process_group", "get_rank", "get_world_size", "dist.all_reduce",
                  "torchrun --standalone --nproc_per_node 2 hello_torch.py"],
        "paddle": ["paddle.device.is_compiled_with_cuda", "paddle.device.cuda.device_count",
                   "paddle.device.get_device", "paddle.device.set_device",
                   "paddle.CUDAPlace", "paddle.CPUPlace", "paddle.device.synchronize",
                   "paddle.device.Event(enable_timing=True)", "elapsed_time",
                   "init_parallel_env", "get_rank", "get_world_size", "dist.all_reduce",
                   "python -m paddle.distributed.launch", "hello_paddle.py"],
    },
    "async": {
        "torch": ["torch.fx.symbolic_trace", "torch.set_num_threads",
                  "torch.get_num_threads", "torch.cuda.synchronize",
                  "torch.cuda.Event(enable_timing=True)", "elapsed_time",
                  "torch.profiler", "ProfilerActivity.CPU", "ProfilerActivity.CUDA",
                  "record_function", "key_averages().table", "export_chrome_trace",
                  "pin_memory()", "non_blocking=True"],
        "paddle": ["paddle.jit.to_static", "paddle.base.core.set_num_threads",
                   "OMP_NUM_THREADS", "paddle.device.set_device",
                   "paddle.device.synchronize", "paddle.device.Event(enable_timing=True)",
                   "elapsed_time", "paddle.profiler", "profiler.Profiler",
                   "ProfilerTarget.CPU", "ProfilerTarget.GPU", "RecordEvent",
                   ".summary(", "export_chrome_tracing", "pin_memory()",
                   "blocking=False"],
    },
    "multidevice": {
        "torch": ["torch.device(", ".to(d)", "torch.cuda.synchronize(", "torch.cuda.Stream(",
                  "with torch.cuda.stream(", "torch.cuda.Event(enable_timing=True)",
                  ".wait_stream(", ".elapsed_time(", "torch.cuda.max_memory_allocated(",
                  "torch.from_numpy("],
        "paddle": ["paddle.CUDAPlace(", "paddle.to_tensor(", "place=", "paddle.CPUPlace()",
                   "paddle.device.synchronize(", "paddle.device.Stream(",
                   "with paddle.device.stream_guard(", "paddle.device.Event(enable_timing=True)",
                   ".wait_stream(", ".elapsed_time(", "paddle.device.cuda.max_memory_allocated("],
    },
    "communication": {
        "torch": ['y.to("cpu", non_blocking=True)', ".is_pinned()", "pin_memory=True",
                  ".copy_(y, non_blocking=True)", "torch.cuda.Stream(", "with torch.cuda.stream(",
                  "torch.cuda.Event(enable_timing=True)", ".wait_event(", ".wait_stream(",
                  ".record_stream(", "torch.cuda.synchronize(", "torchrun",
                  "dist.init_process_group(", "dist.all_reduce(", "async_op=True", ".wait()",
                  "grad_fn", "next_functions"],
        "paddle": ["paddle.CUDAPinnedPlace()", "paddle.CPUPlace()", "blocking=False",
                   "paddle.device.Stream(", "with paddle.device.stream_guard(",
                   "paddle.device.Event(enable_timing=True)", ".wait_event(", ".wait_stream(",
                   "paddle.device.synchronize(", "paddle.distributed.launch",
                   "dist.init_parallel_env()", "dist.all_reduce(", "sync_op=False", ".wait()",
                   "grad_fn", "next_functions", "node_ptr()"],
    },
    "data_parallel": {
        "torch": ["nn.DataParallel", "scatter", "replicate", "parallel_apply", "gather",
                  "torchrun", "init_process_group", "DistributedDataParallel",
                  "DistributedSampler", "set_epoch", "no_sync", "torch.save", "torch.load",
                  "barrier", "register_comm_hook", "bucket_cap_mb", "compress_wrapper",
                  "broadcast_buffers", "find_unused_parameters", "--nnodes",
                  "--rdzv_endpoint", "--node_rank", "PyTorchJob"],
        "paddle": ["paddle.distributed.launch", "init_parallel_env", "paddle.DataParallel",
                   "DistributedBatchSampler", "set_epoch", "no_sync", "paddle.save",
                   "paddle.load", "barrier", "comm_buffer_size", "last_comm_buffer_size",
                   "find_unused_parameters", "fp16_allreduce", "--master", "--nnodes",
                   "PaddleJob"],
    },
    "sharding": {
        "torch": ["fully_shard", "reshard_after_forward", "ZeroRedundancyOptimizer",
                  "DistributedDataParallel", "DTensor", "to_local", "init_device_mesh",
                  "saved_tensors_hooks", "PipelineStage", "ScheduleGPipe", "Schedule1F1B",
                  "torchrun", "torch.cuda.memory_allocated"],
        "paddle": ["shard_optimizer", "ShardingStage1", "ShardingStage2", "ShardingStage3",
                   "ProcessMesh", "group_sharded_parallel", "fleet.init",
                   "sharding_degree", "fleet.distributed_optimizer", "paddle.DataParallel",
                   "saved_tensors_hooks", "PipelineLayer", "train_batch", "dist.send",
                   "dist.recv", "paddle.autograd.backward", "paddle.distributed.launch",
                   "paddle.device.cuda"],
    },
    "fitting": {
        "torch": ["saved_tensors_hooks", "untyped_storage", "checkpoint(",
                  "checkpoint_sequential", "use_reentrant=False",
                  'torch.autocast("cpu", dtype=torch.bfloat16)', "torch.amp.GradScaler",
                  "scaler.scale(loss)", "scaler.step(", "scaler.update()"],
        "paddle": ["saved_tensors_hooks", "fleet.utils import recompute",
                   "recompute_sequential", "paddle.amp.auto_cast", "paddle.amp.decorate",
                   "master_weight=True", "paddle.amp.GradScaler", "scaler.scale(loss)",
                   "scaler.step(", "scaler.update()"],
    },
    "pipeline_schedules": {
        "torch": ["PipelineStage", "ScheduleGPipe", "Schedule1F1B", "ScheduleInterleaved1F1B",
                  "ScheduleInterleavedZeroBubble", "ScheduleZBVZeroBubble",
                  "backward_weight_one_chunk", "saved_tensors_hooks", "torchrun"],
        "paddle": ["dist.send", "dist.recv", "paddle.autograd.backward",
                   "saved_tensors_hooks", "init_parallel_env", "paddle.distributed.launch"],
    },
    "tensor_parallel": {
        "torch": ["torch.autograd.Function", "parallelize_module", "ColwiseParallel",
                  "RowwiseParallel", "SequenceParallel", "loss_parallel", "CommDebugMode",
                  "init_device_mesh", "fully_shard", "saved_tensors_hooks", "torchrun"],
        "paddle": ["PyLayer", "fleet.init", "mp_degree", "ColumnParallelLinear",
                   "dist.parallelize", "ColWiseParallel", "RowWiseParallel",
                   "RowParallelLinear", "VocabParallelEmbedding",
                   "ColumnSequenceParallelLinear", "saved_tensors_hooks",
                   "paddle.distributed.launch"],
    },
    "context_expert": {
        "torch": ["dist.isend", "dist.irecv", "torch.logaddexp", "torch.logsumexp",
                  "context_parallel", "scaled_dot_product_attention",
                  "dist.all_to_all_single", "torch.autograd.Function", "topk",
                  "torchrun"],
        "paddle": ["dist.isend", "dist.irecv", "paddle.logaddexp", "paddle.logsumexp",
                   "RingFlashAttention", "ProcessMesh", "dist.alltoall", "PyLayer",
                   "paddle.topk", "paddle.distributed.launch"],
    },
    "capstone": {
        "torch": ["init_device_mesh", "parallelize_module", "ColwiseParallel",
                  "RowwiseParallel", "PipelineStage", "Schedule1F1B", "fully_shard",
                  "CommDebugMode", "torchrun"],
        "paddle": ["ProcessMesh", "dist.parallelize", "ColWiseParallel",
                   "RowWiseParallel", "shard_tensor", "sharding_level",
                   "paddle.distributed.launch"],
    },
}

# Pages whose code cells are held to the 88-column limit (every page, once rewritten).
COLUMN_LIMIT = 88
COLUMN_PAGES: list[str] = ["toolkit", "async", "multidevice", "communication",
                           "data_parallel", "auto_parallel", "sharding", "fitting",
                           "pipeline_schedules", "tensor_parallel", "context_expert",
                           "capstone"]


def _pages() -> list[Path]:
    return sorted(CHAPTERS.glob("*.md"))


def framework_code(page: Path, framework: str) -> str:
    """Every line of code a reader of ``framework``'s tab sees on ``page``: the cells tagged
    for it and the scripts it includes with ``literalinclude`` (scripts are named after
    their framework, e.g. ``ddp_torch.py``)."""
    parts = [c.source for c in parse_page(page) if c.framework == framework]
    text = page.read_text()
    for m in re.finditer(r"```\{literalinclude\}\s+(\S+)", text):
        target = (page.parent / m.group(1)).resolve()
        if framework in target.name and target.exists():
            parts.append(target.read_text())
    return "\n".join(parts)


def _normalise(code: str) -> str:
    code = re.sub(r"(?i)pytorch|paddlepaddle|paddle|torch", "FW", code)
    return re.sub(r"\s+", " ", code).strip()


@pytest.mark.parametrize("page", sorted(API))
def test_each_tab_shows_its_frameworks_own_api(page):
    path = CHAPTERS / f"{page}.md"
    for framework, calls in API[page].items():
        code = framework_code(path, framework)
        missing = [c for c in calls if c not in code]
        assert not missing, f"{page}.md: the {framework} tab never shows {missing}"


@pytest.mark.parametrize("page", [p.stem for p in _pages()])
def test_no_two_sibling_tabs_are_the_same_code_but_for_the_framework(page):
    cells = parse_page(CHAPTERS / f"{page}.md")
    same = []
    for a, b in zip(cells, cells[1:]):
        if {a.framework, b.framework} == {"torch", "paddle"} and len(a.source) > 80:
            if _normalise(a.source) == _normalise(b.source):
                same.append(a.index)
    assert not same, f"{page}.md: cells {same} and the next are one cell with a word changed"


def _prose(text: str) -> str:
    return re.sub(r"```.*?```", "", text, flags=re.S)


@pytest.mark.parametrize("page", [p.stem for p in _pages()])
def test_no_reader_text_says_seed(page):
    text = _prose((CHAPTERS / f"{page}.md").read_text())
    hits = [line for line in text.splitlines()
            if re.search(r"(?i)\bseed('s|s)?\b", line)
            and not re.search(r"manual_seed|seed\(|seed=|random seed|default_rng", line)]
    assert not hits, f"{page}.md says 'seed' to readers: {hits[:3]}"


@pytest.mark.parametrize("page", [p.stem for p in _pages()])
def test_no_private_helper_source_on_the_page(page):
    text = (CHAPTERS / f"{page}.md").read_text()
    assert not re.search(r"show_source\([^)]*(\b_[a-z]|\._[a-z])", text)


@pytest.mark.parametrize("page", COLUMN_PAGES)
def test_code_fits_the_column(page):
    long = [(c.index, line) for c in parse_page(CHAPTERS / f"{page}.md")
            for line in c.source.splitlines() if len(line) > COLUMN_LIMIT]
    assert not long, f"{page}.md: lines over {COLUMN_LIMIT} columns: {long[:3]}"


@pytest.mark.parametrize("page", EXPERIMENT_PAGES)
def test_the_hardware_line_comes_first_under_the_title(page):
    text = (CHAPTERS / f"{page}.md").read_text()
    body = text.split("\n# ", 1)[1]
    first_cell = body.split("```{code-cell}", 1)[1].split("```", 1)[0]
    assert "hardware_note(" in first_cell, f"{page}.md: the first cell is not the hardware line"


# --- each tab stands alone (issue 24) ------------------------------------------------------

_HIDDEN = {"remove-cell", "remove-input"}


def _python_of(source: str) -> str:
    """A cell as plain Python: ``!cmd`` and ``%magic`` lines are no names; a
    ``%%writefile`` cell writes a file and defines nothing."""
    out = []
    for line in source.splitlines():
        if line.startswith("%%"):
            return ""
        stripped = line.lstrip()
        out.append(line[: len(line) - len(stripped)] + "pass"
                   if stripped.startswith(("!", "%")) else line)
    return "\n".join(out)


def _defined_and_used(source: str) -> tuple[set[str], set[str]]:
    import ast

    defined, used = set(), set()
    for n in ast.walk(ast.parse(_python_of(source))):
        if isinstance(n, ast.Name):
            (used if isinstance(n.ctx, ast.Load) else defined).add(n.id)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(n.name)
        elif isinstance(n, ast.arg):
            defined.add(n.arg)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            defined |= {(a.asname or a.name).split(".")[0] for a in n.names}
        elif isinstance(n, ast.ExceptHandler) and n.name:
            defined.add(n.name)
    return defined, used


def _borrowed_names(page: Path, framework: str) -> list[tuple[int, list[str]]]:
    """(cell, names) where a visible cell of ``framework``'s tab uses a name that the page
    defines, but only in a hidden cell, in the other tab, or further down."""
    import builtins

    cells = [c for c in parse_page(page) if "skip-execution" not in c.tags]
    on_page = set().union(*(_defined_and_used(c.source)[0] for c in cells))
    have, out = set(dir(builtins)), []
    for c in cells:
        if c.framework not in (None, framework) or _HIDDEN & set(c.tags):
            continue
        defined, used = _defined_and_used(c.source)
        missing = sorted((used - defined - have) & on_page)
        if missing:
            out.append((c.index, missing))
        have |= defined
    return out


@pytest.mark.parametrize("page", [p.stem for p in _pages()])
def test_a_reader_who_copies_one_tab_gets_every_name_it_uses(page):
    """Copied in order into a fresh notebook, one tab's visible cells (and the cells both
    tabs share) define every name they use: nothing comes from a hidden cell or from the
    other framework's tab."""
    for fw in ("torch", "paddle"):
        assert not _borrowed_names(CHAPTERS / f"{page}.md", fw), (page, fw)


def test_the_tab_check_finds_a_name_from_a_hidden_cell(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("# T\n\n```{code-cell} ipython3\n:tags: [remove-cell]\nout = 1\n```\n\n"
                    "```{code-cell} ipython3\n:tags: [paddle]\nprint(out)\n```\n\n"
                    "```{code-cell} ipython3\n:tags: [torch]\nx = 2\n```\n\n"
                    "```{code-cell} ipython3\nprint(x)\n```\n")
    assert _borrowed_names(page, "paddle") == [(1, ["out"]), (3, ["x"])]
    assert _borrowed_names(page, "torch") == []


def _glue_in_sight(page: Path) -> list[int]:
    """Cells a reader sees (their code shown) that call ``myst_nb.glue``: the page's
    bookkeeping, which belongs in a hidden cell after the cell that measured."""
    return [c.index for c in parse_page(page) if not _HIDDEN & set(c.tags)
            and re.search(r"\bglue\b", c.source)]


@pytest.mark.parametrize("page", [p.stem for p in _pages()])
def test_no_visible_cell_glues(page):
    assert not _glue_in_sight(CHAPTERS / f"{page}.md"), page


def test_the_glue_check_finds_a_visible_glue(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("# T\n\n```{code-cell} ipython3\n:tags: [remove-cell]\n"
                    "from myst_nb import glue\nglue('a', 1)\n```\n\n"
                    "```{code-cell} ipython3\n:tags: [torch]\nglue('b', 2)\n```\n\n"
                    "```{code-cell} ipython3\n:tags: [remove-input]\nglue('c', 3)\n```\n")
    assert _glue_in_sight(page) == [1]
