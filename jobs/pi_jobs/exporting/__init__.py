"""pi_jobs.exporting: the lake's pins out to other tools' formats (`pilake export lerobot`).

Example:
    >>> from pi_jobs.exporting import export_lerobot
    >>> export_lerobot(LakeLayout("/data/lake"), "pick-v3", Path("pick-v3-lerobot")).frames
    24000
"""

from pi_jobs.exporting.lerobot import ExportError, ExportReport, FileLimits, export_lerobot

__all__ = ["ExportError", "ExportReport", "FileLimits", "export_lerobot"]
