"""The lane: chat requests that extend their conversation's previous body, streamed upstream as
they arrive (see ``front``)."""

from .front import lane_protocol

__all__ = ["lane_protocol"]
