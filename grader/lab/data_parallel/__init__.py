"""Helpers of the data-parallelism page (``chapters/data_parallel.md``).

The page imports: ``problem.make_problem`` (what the ``nn.DataParallel`` stand-in trains),
``phases`` (``DataParallelTrainer``, ``PHASES``, ``phase_table``, ``plot_phases``: the
step phase by phase on the course's devices), ``memory.plot_memory`` (what each device
holds after backward), ``speed.compare`` (two devices against one, measured) and
``comm`` (``plot_allreduces``, ``plot_buckets``: figures of what DDP and
``paddle.DataParallel`` communicate, read from the launched scripts' records).
"""
