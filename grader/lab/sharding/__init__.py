"""Helpers of the sharding page (``chapters/sharding.md``).

The page imports: ``measure`` (``MODEL`` and the runs of the chapter's ZeRO, pipeline and
2-D-mesh scripts read back: memory per rank, collectives, pipeline timelines),
``figures`` (``memory_figure``, ``pipeline_figure``, ``bubble_figure``), ``tables``
(``collectives_table``, ``prediction_table``, ``pipeline_table``, ``plans_table``, ``mib``)
and ``explorer`` (the sharding planner as an ipywidgets explorer). The planner itself is
``grader.lab.planner`` (``planner.sharded``), shared with the automatic-parallelism page.
"""
