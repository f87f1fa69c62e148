"""Hung torch.distributed jobs with a written ground truth; see README.md here."""
