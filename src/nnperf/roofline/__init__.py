"""The roofline: where each kernel or step sits against what the machine can do.

Takes ncu kernel tables, operator profiles, complexity and timed runs, and gives the
roofline points (`points`) under three kinds of ceiling: the datasheet's (`peaks`,
config/peaks.yaml), the measured ones (`ceilings`, rule `ceilings`) and the profile's own.
"""
