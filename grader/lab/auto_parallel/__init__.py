"""Helpers of the automatic-parallelism page (``chapters/auto_parallel.md``).

The page imports: ``measure`` (the chapter scripts' measurements read back and set
beside the planner: the collective sweep, its fit, the plans' steps), ``figures``
(``placements_figure``, ``sweep_figure``, ``prediction_figure``) and
``widgets.calculator`` (the planner as an ipywidgets calculator). The planner itself is
``grader.lab.planner``, shared with the sharding page.
"""
