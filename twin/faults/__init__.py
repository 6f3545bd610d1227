"""Faults: what can go wrong on a fabric, injected into a running lab and cleared exactly.

base.py      what every kind shares (params, targets, the context it acts in)
registry.py  the list of kinds
engine.py    inject, list and clear, recorded in the lab state before anything changes
agent.py     the process a fault that acts over time runs in (background.py starts and ends it)
"""
