"""``knowgic-tiny``: the offline default model, a small GPT-2 trained by the project's own deterministic
script on KnowGIC's facts (DESIGN.md, "Models").

>>> from knowgic.models.tiny import ensure_tiny_model
>>> folder = ensure_tiny_model()  # built once (a few minutes on a laptop CPU), then cached

The folder loads with ``transformers.AutoModelForCausalLM`` / ``AutoTokenizer``.
"""

from knowgic.models.tiny.build import (
    STATS_FILE,
    build_tiny_model,
    ensure_tiny_model,
    is_built,
    is_complete,
    read_stats,
    tiny_model_dir,
)
from knowgic.models.tiny.evaluate import KnownReport, evaluate_known_share, evaluate_rewrites
from knowgic.models.tiny.facts import TrainingFacts, load_training_facts
from knowgic.models.tiny.recipe import MODEL_NAME, TINY_RECIPE, TinyRecipe, recipe_hash

__all__ = [
    "MODEL_NAME",
    "STATS_FILE",
    "TINY_RECIPE",
    "KnownReport",
    "TinyRecipe",
    "TrainingFacts",
    "build_tiny_model",
    "ensure_tiny_model",
    "evaluate_known_share",
    "evaluate_rewrites",
    "is_built",
    "is_complete",
    "load_training_facts",
    "read_stats",
    "recipe_hash",
    "tiny_model_dir",
]
