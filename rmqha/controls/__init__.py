"""Controls: deliberate defects the audit's own tests switch on, kept outside the broker.

planted.py holds the planted bugs (plantBug=) and seams_for(), which fills the broker's named seams
(rmqha/broker/support/seams.py). rmqha.broker never imports this package (an import contract in
pyproject.toml); the broker's process entry loads planted.py by name only when plantBug= is set.
"""
