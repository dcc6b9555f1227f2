"""PySpark audit pipeline: commit-log decoder, replica audit, history checker, reports."""
