"""A RocketMQ 4.x compatible name server (WIRE-FACTS §3)."""
