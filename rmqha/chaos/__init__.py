"""Fault and workload library for the chaos test kit."""
