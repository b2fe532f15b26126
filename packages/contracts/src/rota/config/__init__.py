"""`rota.yaml`: the cluster, the tiers, the teams and the policy."""

from rota.config.loader import ConfigError, ConfigIssue, load_config, parse_config
from rota.config.model import Node, RotaConfig, Team

__all__ = ["ConfigError", "ConfigIssue", "Node", "RotaConfig", "Team", "load_config", "parse_config"]
