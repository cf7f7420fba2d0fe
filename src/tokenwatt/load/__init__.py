"""Driving an endpoint: workloads, arrival schedules, the target (a URL or the simulator) and
one probe at one rate. The SLO search and the whole benchmark build on ``probe.run_probe``."""
