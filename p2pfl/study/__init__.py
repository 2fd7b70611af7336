"""Studies: a grid of p2pfl.run points (options × seeds) run locally or as a Slurm job array, resumable."""
from p2pfl.study.folder import PointState, StudyFolder, status_table
from p2pfl.study.plan import Plan, Point, StudyError, expand, load_study

__all__ = ["Plan", "Point", "PointState", "StudyError", "StudyFolder", "expand", "load_study", "status_table"]
