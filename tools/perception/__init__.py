"""Q-Guide's five perception tools over a corpus store, their specs, and a dispatcher."""

from tools.perception.context import PerceptionContext, PerceptionSettings, Reader
from tools.perception.lookup import targeted_lookup
from tools.perception.observation import FULL_PAGE, Observation, parse_region
from tools.perception.spatial import spatial_recovery
from tools.perception.specs import (
    PERCEPTION_TOOLS,
    SPATIAL_RECOVERY,
    STRUCTURE_RECOVERY,
    TARGETED_LOOKUP,
    TEXT_RECOVERY,
    VISUAL_DETAIL,
)
from tools.perception.structure import structure_recovery
from tools.perception.text import text_recovery
from tools.perception.toolkit import PerceptionToolkit
from tools.perception.visual import visual_detail

__all__ = [
    "FULL_PAGE",
    "Observation",
    "PERCEPTION_TOOLS",
    "PerceptionContext",
    "PerceptionSettings",
    "PerceptionToolkit",
    "Reader",
    "SPATIAL_RECOVERY",
    "STRUCTURE_RECOVERY",
    "TARGETED_LOOKUP",
    "TEXT_RECOVERY",
    "VISUAL_DETAIL",
    "parse_region",
    "spatial_recovery",
    "structure_recovery",
    "targeted_lookup",
    "text_recovery",
    "visual_detail",
]
