"""The conversation graph and the models behind it."""

from threadline.agent.graph import build_graph
from threadline.agent.models import make_model

__all__ = ["build_graph", "make_model"]
