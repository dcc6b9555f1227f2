"""Mutation testing of the HA core and the record format: `make mutation` (see README.md here)."""
