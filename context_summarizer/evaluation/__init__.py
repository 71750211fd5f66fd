"""Offline evaluation of compaction strategies on datasets of agent trajectories."""
