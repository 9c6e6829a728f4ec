"""Goodput: where a job's wall time went (:mod:`.accounting`) and the checkpoint interval that keeps
the most of it (:mod:`.autopilot`), both from clusterd's own records and the ranks' beats."""
