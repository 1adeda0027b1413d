"""Helpers of the capstone page, chapters/capstone.md ("One transformer, every axis"):
reading back what chapters/scripts/capstone_torch.py and capstone_paddle.py wrote, the
loss-parity check every layout must pass (and its control must fail), the loss figure,
the recorded 16-rank run (dated, and marked stale when its script changed), the
planner's predictions for the same :class:`~grader.lab.planner.composed.Layout`, and
the runs resumed from a checkpoint against the runs that saved it.

The page imports: load, parity, parity_words, loss_figure, RECORD_16, read_record,
record_words, layout_rows, layout_table, flops_per_token, flops_words,
throughput_table, memory_rows, memory_table, memory_words, counts_words,
count_gaps, momentum_seen, momentum_words, paddle_cost_table, paddle_comm_words,
resumes, resume_table, resume_words,
save_times, elastic_lines, RECORD_ELASTIC, RECORD_PADDLE_ELASTIC, RECORD_RESHARD.
"""
from .parity import (TOLERANCE, ParityRow, drifts, load, loss_figure, parity,
                     parity_words, worst_relative)
from .records import (RECORD_16, RECORD_ELASTIC, RECORD_PADDLE_ELASTIC, RECORD_RESHARD,
                      read_record, record_words, script_digest, write_record)
from .resume import (ResumeRow, elastic_lines, resume_table, resume_words, resumes,
                     save_times)
from .tables import (count_gaps, counts_words, flops_per_token, flops_words, layout_rows,
                     layout_table, memory_rows, memory_table, memory_words, momentum_seen,
                     momentum_words, paddle_comm_words, paddle_cost_table,
                     throughput_table)

__all__ = ["TOLERANCE", "ParityRow", "load", "parity", "parity_words", "worst_relative",
           "drifts",
           "loss_figure", "RECORD_16", "read_record", "record_words", "script_digest",
           "write_record", "layout_rows", "layout_table", "flops_per_token", "flops_words",
           "throughput_table", "memory_rows", "memory_table", "memory_words", "count_gaps",
           "counts_words", "momentum_seen", "momentum_words", "paddle_cost_table",
           "paddle_comm_words", "RECORD_ELASTIC",
           "RECORD_PADDLE_ELASTIC", "RECORD_RESHARD",
           "ResumeRow", "elastic_lines", "resumes", "resume_table", "resume_words", "save_times"]
