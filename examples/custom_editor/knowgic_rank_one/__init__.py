"""An example KnowGIC editor plug-in: rank-one fine-tuning (see README.md)."""

from knowgic_rank_one.editor import RankOneFT

__all__ = ["RankOneFT"]
