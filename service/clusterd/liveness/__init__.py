"""Failure detection from the jobs themselves, seconds ahead of Slurm's SlurmdTimeout.

Each rank's client library sends a heartbeat (``JobService.Heartbeat``); :mod:`.table` keeps the
latest beat per rank and run, :mod:`.detector` turns silence, a rank's crash report and a probe of
the suspect node (:mod:`.probe`) into a :class:`.detector.Detection`, which the restarter acts on.
The same beats carry a rank's claim to hold for a stop signal; :mod:`.stopping` turns the claims of
a run into the one step its ranks stop at.
"""
