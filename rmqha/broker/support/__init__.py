"""What every part of the broker leans on: the clock protocol, shared errors, supervised periodic work,
rate-limited logging, peer-name validation and atomic config files."""
