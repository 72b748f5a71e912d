"""Typed, validated configuration: the single source of truth for topology."""

from app_config.errors import ConfigError, Problem
from app_config.loader import load_settings
from app_config.model import Settings

__all__ = ["ConfigError", "Problem", "Settings", "load_settings"]
