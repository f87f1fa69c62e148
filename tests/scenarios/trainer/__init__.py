"""A training package run as `python -m trainer.main` (scenario module_lock_deadlock)."""
