"""Helpers of the page "Pipeline schedules that shrink the bubble"
(``chapters/pipeline_schedules.md``): the runs of ``schedules_torch.py`` and
``schedules_paddle.py`` read back (:mod:`.measure`: the bubble on each run's timeline,
its formula, the order replayed on equal and on measured stage times, activations in
flight), the page's table and figures (:mod:`.figures`) and the sentences it computes
from them (:mod:`.words`). The formulas themselves are the planner's
(:mod:`grader.lab.planner.schedules`).

The page imports ``rows``, ``replay``, ``timeline`` (from :mod:`.measure`),
``schedule_table``, ``timelines_figure``, ``comparison_figure`` (:mod:`.figures`) and
the sentence functions of :mod:`.words`.
"""
from .measure import (ScheduleRow, bubble_of, in_flight, pass_times, replay, rows,
                      timeline)

__all__ = ["ScheduleRow", "bubble_of", "in_flight", "pass_times", "replay", "rows",
           "timeline"]
