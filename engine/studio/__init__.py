"""The search studio: a local web app where people answer questions with the agents' search tool.

Each annotator's actions become a run directory in the agents' schema (agent "human"):
`dossier studio --corpus C --questions Q --out OUT`, then `dossier eval OUT/<annotator>`.
"""

from engine.studio.annotator import AnnotatorRun, annotator_slug
from engine.studio.config import StudioConfig
from engine.studio.server import LiveStudio, build_server, serve_in_thread, studio_url
from engine.studio.service import Studio
from engine.studio.trajectory import build_records

__all__ = ["AnnotatorRun", "annotator_slug", "StudioConfig", "LiveStudio", "build_server", "serve_in_thread",
           "studio_url", "Studio", "build_records"]
