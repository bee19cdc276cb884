"""Delta building: the exact delta of one site (site_delta.py, touched_delta.py) and of a
view over several sites by delta rules (join_delta.py, equi_join.py).
"""
