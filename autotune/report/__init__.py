"""`autotune report`: one self-contained HTML file that says which config wins at which load.

data   the study as rows: trials, best so far, the per-concurrency schedule
plots  matplotlib (Agg) figures as PNG data URIs
units  the winning unit file against the original, from the trials' stored files
html   the page
build  `build_report(cfg, out_dir)`: all of the above, written to one file
"""

from autotune.report.build import build_report

__all__ = ["build_report"]
