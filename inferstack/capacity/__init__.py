"""Capacity and cost: the planner that turns an SLO and a throughput profile into fleet sizes and
scaling targets, the dated price table, and the `plan` report."""
