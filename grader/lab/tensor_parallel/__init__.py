"""Helpers of the tensor-parallel page, chapters/tensor_parallel.md ("Splitting the layers:
tensor and sequence parallelism"): reading back what chapters/scripts/tp_torch.py and
tp_paddle.py wrote, the figure, the planner's predictions beside the measurements
(planner.layers), and the words of the sentences that interpret them.

The page imports: load, label, counted, predicted, agreement, agreement_words,
comm_debug_agrees, activation_points, activation_figure, falls_words, calibrate,
prediction_rows, prediction_table, memory_line, error_words, time_words.
"""
from .figures import activation_figure, activation_points
from .results import (MODEL, agreement, agreement_words, calibrate, collective_lines,
                      comm_debug_agrees, counted, error_words, falls_words, label, load,
                      memory_line,
                      plan_of, predicted, prediction_rows, prediction_table, sent,
                      time_words)

__all__ = ["MODEL", "load", "label", "plan_of", "counted", "predicted", "sent",
           "collective_lines", "agreement", "agreement_words", "comm_debug_agrees",
           "calibrate", "prediction_rows", "prediction_table", "memory_line", "error_words", "time_words",
           "falls_words", "activation_figure", "activation_points"]
