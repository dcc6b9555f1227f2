"""What a run is made of, below the cluster: the fault vocabulary (faults.py) and the run folder's formats
(layout and node.json, the history format and its recorder, the fault log). Everything above imports
them: cluster, chaos, pipeline, matrix and rmqkit (the layer contract in pyproject.toml)."""
